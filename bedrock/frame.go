package bedrock

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"unicode/utf16"
)

// The protocol's constants (docs/bedrock.md#the-protocol), in ticks of 1/20 s.
const (
	ProtocolVersion       = 1                  // PROTOCOL_VERSION
	Namespace             = "bedrock-core"     // the script-event namespace
	ChannelID             = "bedrock-core:bus" // the one channel every message travels on
	MaxMessage            = 2000               // MAX_MESSAGE: characters (UTF-16 code units) per wire message
	ChunkTTLTicks         = 200                // CHUNK_TTL_TICKS: an incomplete group is discarded after this long
	EvictionIntervalTicks = 20                 // how often stalled groups are swept
	FlushIntervalTicks    = 1                  // FLUSH_INTERVAL_TICKS
	MaxFlushPerTick       = 50                 // MAX_FLUSH_PER_TICK
	TicksPerSecond        = 20
)

// Frame is one wire message: a slice of an encoded envelope.
type Frame struct {
	C string   // chunk-group id: the sender's message id
	S int      // zero-based sequence index
	T int      // total frames in the group
	P []uint16 // this frame's slice of the encoded envelope, in code units
}

// appendFrame appends f as JSON.stringify({c, s, t, p}) writes it.
func appendFrame(dst []byte, f Frame) []byte {
	dst = append(dst, `{"c":`...)
	dst = appendQuotedString(dst, f.C)
	dst = append(dst, `,"s":`...)
	dst = strconv.AppendInt(dst, int64(f.S), 10)
	dst = append(dst, `,"t":`...)
	dst = strconv.AppendInt(dst, int64(f.T), 10)
	dst = append(dst, `,"p":`...)
	dst = appendQuoted(dst, f.P)
	return append(dst, '}')
}

// EncodeFrame is the wire message of f.
func EncodeFrame(f Frame) string { return string(appendFrame(nil, f)) }

// Overhead is the length, in code units, of a frame of group c with s and
// t at 999999 and an empty p: what a frame costs beyond its payload.
func Overhead(c string) int { return len16(EncodeFrame(Frame{C: c, S: 999999, T: 999999})) }

// Budget is the per-frame payload budget for group c: the room MaxMessage
// leaves past the overhead, halved, because JSON escaping can double every
// character of p.
func Budget(c string) int { return (MaxMessage - Overhead(c)) / 2 }

// Split cuts an encoded envelope (JSON text) into the frames of group c:
// slices of at most Budget(c) code units. A JavaScript sender slices
// blindly and may cut a surrogate pair in two; each half is then written
// as a six-character \udxxx escape, so a frame can exceed MaxMessage by a
// few characters. Split ends such a slice one unit early instead, so
// every frame it makes fits; any receiver reassembles either slicing. An
// empty envelope is one empty frame; a budget under one unit (a group id
// too long for any frame) is an error.
func Split(c string, encoded string) ([]Frame, error) {
	budget := Budget(c)
	if budget < 1 {
		return nil, ErrGroupID
	}
	u := units(encoded)
	var frames []Frame
	for start := 0; start < len(u) || len(frames) == 0; {
		end := min(start+budget, len(u))
		if end < len(u) && end-1 > start && utf16.IsSurrogate(rune(u[end-1])) && u[end-1] < 0xdc00 && u[end] >= 0xdc00 && u[end] <= 0xdfff {
			end-- // keep the pair together (a one-unit budget cannot)
		}
		frames = append(frames, Frame{C: c, S: len(frames), P: u[start:end]})
		start = end
	}
	for i := range frames {
		frames[i].T = len(frames)
	}
	return frames, nil
}

// ErrGroupID is returned when a group id leaves no room for a payload.
var ErrGroupID = errors.New("bedrock: message id too long for a frame")

var errFrame = errors.New("bedrock: malformed frame")

// DecodeFrame decodes a wire message strictly: a JSON object whose c is a
// string, s and t integers, p a string (keys match exactly, as in
// JavaScript; other keys are ignored). p keeps lone surrogates.
func DecodeFrame(msg string) (Frame, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(msg), &obj); err != nil || obj == nil {
		return Frame{}, errFrame
	}
	var f Frame
	c, ok := jsString(obj["c"])
	if !ok {
		return Frame{}, errFrame
	}
	f.C = stringOf(c)
	if f.S, ok = jsInt(obj["s"]); !ok {
		return Frame{}, errFrame
	}
	if f.T, ok = jsInt(obj["t"]); !ok {
		return Frame{}, errFrame
	}
	if f.P, ok = jsString(obj["p"]); !ok {
		return Frame{}, errFrame
	}
	return f, nil
}

// jsString decodes a JSON string value into code units.
func jsString(raw json.RawMessage) ([]uint16, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return nil, false
	}
	s, n, err := unquote16(raw)
	return s, err == nil && n == len(raw)
}

// jsInt decodes a JSON number that is an integer (Number.isInteger), in
// the range an int holds exactly on both sides.
func jsInt(raw json.RawMessage) (int, bool) {
	if len(raw) == 0 || !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int(f), true
}
