package bedrock

import (
	"encoding/json"
	"errors"
	"strconv"
)

// Message types (docs/bedrock.md#the-protocol).
const (
	TypeAnnounce      = "announce"       // discovery: {version, schemaVersion, meta?}
	TypeWhois         = "whois"          // discovery: ask everyone to announce
	TypeRequest       = "req"            // RPC: {method, params?}
	TypeResponse      = "res"            // RPC: {rid, ok, data?, err?}
	TypeStateDelta    = "state-delta"    // state: {ns, key, value?, ver, del?}
	TypeStateRequest  = "state-req"      // state: {} or {ns}
	TypeStateSnapshot = "state-snapshot" // state: {ns, entries}
)

// Envelope is one bus message (docs/bedrock.md#the-protocol):
// JSON-serialised, then split into frames.
type Envelope struct {
	V    int             // protocol version
	Src  string          // sender add-on id
	IID  string          // sender instance id
	Dst  string          // target add-on id; "" for a broadcast
	Type string          // message type
	MID  string          // message id: RPC correlation and chunk-group id
	Data json.RawMessage // type-specific payload; nil when absent
}

// AppendEnvelope appends e's JSON text as the JavaScript bus writes it
// ({v, src, iid, dst?, type, mid, data?}). Data must be valid JSON; it is
// re-written JavaScript's way (see canonical).
func AppendEnvelope(dst []byte, e *Envelope) ([]byte, error) {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(e.V), 10)
	dst = append(dst, `,"src":`...)
	dst = appendQuotedString(dst, e.Src)
	dst = append(dst, `,"iid":`...)
	dst = appendQuotedString(dst, e.IID)
	if e.Dst != "" {
		dst = append(dst, `,"dst":`...)
		dst = appendQuotedString(dst, e.Dst)
	}
	dst = append(dst, `,"type":`...)
	dst = appendQuotedString(dst, e.Type)
	dst = append(dst, `,"mid":`...)
	dst = appendQuotedString(dst, e.MID)
	if e.Data != nil {
		if !json.Valid(e.Data) {
			return nil, errors.New("bedrock: envelope data is not JSON")
		}
		dst = append(dst, `,"data":`...)
		var err error
		if dst, err = canonical(dst, e.Data); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// ErrEnvelope is a malformed envelope or one of another protocol version.
var ErrEnvelope = errors.New("bedrock: malformed envelope")

// DecodeEnvelope decodes an envelope strictly: a JSON object with v equal
// to ProtocolVersion, src, iid, type and mid non-empty strings, dst absent
// or a string, data any JSON value or absent. Keys match exactly; others
// are ignored.
func DecodeEnvelope(text []uint16) (*Envelope, error) {
	// The text of a JavaScript sender escapes every lone surrogate, so its
	// code units make valid UTF-8 (a raw lone surrogate, which only a
	// broken sender writes, becomes U+FFFD).
	b := []byte(stringOf(text))
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
		return nil, ErrEnvelope
	}
	v, ok := jsInt(obj["v"])
	if !ok || v != ProtocolVersion {
		return nil, ErrEnvelope
	}
	e := &Envelope{V: v}
	for _, f := range []struct {
		key string
		dst *string
	}{{"src", &e.Src}, {"iid", &e.IID}, {"type", &e.Type}, {"mid", &e.MID}} {
		s, ok := jsString(obj[f.key])
		if !ok || len(s) == 0 {
			return nil, ErrEnvelope
		}
		*f.dst = stringOf(s)
	}
	if d, present := obj["dst"]; present {
		s, ok := jsString(d)
		if !ok {
			return nil, ErrEnvelope
		}
		e.Dst = stringOf(s)
	}
	if d, present := obj["data"]; present {
		e.Data = d
	}
	return e, nil
}
