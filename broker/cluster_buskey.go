package broker

// The bus key (docs/cluster.md#bus-key). NATS's own trust ends at its
// permissions: whoever may read or publish a bus's subjects reads every
// payload and forges directory entries, replicated state and frames "from"
// any node. With a bus key, shared by the brokers of one bus and nobody
// else, every message one broker sends another is an envelope the
// receiver checks before anything reads it:
//
//	mode (1) | nonce (12: instance 4, stamp 8) | inner | tag (16)
//	inner = uvarint len | subject | uvarint len | headers | body
//
// mode envMAC leaves inner readable and authenticates mode, nonce and
// inner with AES-256-GCM (as GMAC); envSealed encrypts inner too, with
// mode and nonce as associated data. The subject inside must be the one
// the message came on, so a message cannot be moved to another subject
// (another broker's name, another kind); NATS headers ride inside, so
// none can be added on the way. The stamp, the sender's clock in
// nanoseconds made strictly increasing per process, bounds replays: a
// receiver refuses a message stamped more than BusKeyWindow from its own
// clock, or not after the last it took from that sender's process on
// that subscription (a sender publishes each subscription's messages in
// stamp order: see cluster.publish).
//
// One key is shared by every broker, so the key tells a broker of the bus
// from a stranger, not one broker from another: NATS permissions still
// pin each broker to its own subjects (docs/cluster.md#trust).

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/auth"
	"busbar/wire"
)

const (
	// BusKeyMinBytes is the least key material a bus key holds: a key
	// file of fewer bytes (after trimming white space) is refused.
	BusKeyMinBytes = 32
	// BusKeyMaxBytes bounds a bus key file, which is read whole.
	BusKeyMaxBytes = 4 << 10
	// BusKeyWindow is how far a message's stamp may be from the
	// receiver's clock: older or newer, it is refused as a replay, so the
	// brokers' clocks must agree within it.
	BusKeyWindow = 30 * time.Second
)

const (
	envMAC     byte = 1 // inner in clear, authenticated
	envSealed  byte = 2 // inner encrypted and authenticated
	envNonce        = 12
	envTag          = 16
	envFixed        = 1 + envNonce + envTag
	busKeyInfo      = "busbar bus key v1"
)

// Why a message failed the bus key.
var (
	errEnvelope = errors.New("not a bus envelope (a broker without the bus key, or not a broker)")
	errForged   = errors.New("fails the bus key (forged, damaged, or sealed with another key)")
	errStale    = errors.New("stamped outside the bus key's window (a replay, or clocks that disagree)")
	errReplayed = errors.New("replayed (stamped no later than one already taken)")
	errMoved    = errors.New("sent on another subject than it names (moved)")
)

// busKey seals and opens the brokers' NATS messages. Safe for concurrent
// use.
type busKey struct {
	aead  cipher.AEAD
	mode  byte
	inst  [4]byte      // this process, in every nonce
	clock atomic.Int64 // the last stamp given
}

func newBusKey(material []byte, seal bool) (*busKey, error) {
	material = []byte(strings.TrimSpace(string(material)))
	if len(material) < BusKeyMinBytes {
		return nil, fmt.Errorf("broker: Cluster.BusKey has %d bytes, fewer than %d", len(material), BusKeyMinBytes)
	}
	if len(material) > BusKeyMaxBytes {
		return nil, fmt.Errorf("broker: Cluster.BusKey has %d bytes, more than %d", len(material), BusKeyMaxBytes)
	}
	key, err := hkdf.Key(sha256.New, material, nil, busKeyInfo, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	k := &busKey{aead: aead, mode: envMAC}
	if seal {
		k.mode = envSealed
	}
	_, _ = rand.Read(k.inst[:])
	return k, nil
}

// stamp is the time in nanoseconds, strictly after every stamp before it.
func (k *busKey) stamp() int64 {
	for {
		last := k.clock.Load()
		now := max(time.Now().UnixNano(), last+1)
		if k.clock.CompareAndSwap(last, now) {
			return now
		}
	}
}

// wrap appends to dst the envelope of a message of subject with headers
// hdr and body.
func (k *busKey) wrap(dst []byte, subject string, hdr nats.Header, body []byte) []byte {
	start := len(dst)
	dst = append(dst, k.mode)
	dst = append(dst, k.inst[:]...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(k.stamp()))
	nonce := dst[start+1 : start+1+envNonce : start+1+envNonce]
	inner := len(dst)
	dst = binary.AppendUvarint(dst, uint64(len(subject)))
	dst = append(dst, subject...)
	dst = appendHeader(dst, hdr)
	dst = append(dst, body...)
	if k.mode == envSealed {
		return k.aead.Seal(dst[:inner], nonce, dst[inner:], dst[start:inner])
	}
	return k.aead.Seal(dst, nonce, nil, dst[start:])
}

// BusKeyRoom is what a bus key keeps free of NATS's max_payload in every
// message between brokers of a bus with the subject prefix prefix: the
// envelope's fixed bytes and the longest subject, <prefix>.relayed.<to>.<from>.
// With a key, every limit that follows max_payload (docs/cluster.md#limits)
// is this much lower.
func BusKeyRoom(prefix string) int {
	return envelopeRoom(len(prefix+".relayed..")+2*wire.MaxLabelLen, 0)
}

// envelopeRoom bounds what wrap adds to a message of a subject of at most
// subjectLen bytes with headers of at most hdrLen bytes encoded.
func envelopeRoom(subjectLen, hdrLen int) int {
	return envFixed + 2*binary.MaxVarintLen32 + subjectLen + hdrLen
}

// freshness is what one subscription took from each sender's process:
// the last stamp. Owned by the subscription's handler goroutine.
type freshness struct {
	last  map[freshKey]int64
	swept time.Time
}

type freshKey struct {
	sender string
	inst   [4]byte
}

// open checks m's envelope and replaces m's data and headers by what it
// carries; f is the subscription's.
func (k *busKey) open(m *nats.Msg, f *freshness, now time.Time) error {
	d := m.Data
	if len(d) < envFixed || (d[0] != envMAC && d[0] != envSealed) {
		return errEnvelope
	}
	nonce := d[1 : 1+envNonce]
	var inner []byte
	if d[0] == envSealed {
		var err error
		if inner, err = k.aead.Open(d[1+envNonce:1+envNonce], nonce, d[1+envNonce:], d[:1+envNonce]); err != nil {
			return errForged
		}
	} else {
		end := len(d) - envTag
		if _, err := k.aead.Open(nil, nonce, d[end:], d[:end]); err != nil {
			return errForged
		}
		inner = d[1+envNonce : end]
	}
	stamp := int64(binary.BigEndian.Uint64(nonce[4:]))
	if skew := now.UnixNano() - stamp; skew > int64(BusKeyWindow) || -skew > int64(BusKeyWindow) {
		return errStale
	}
	subject, rest, ok := cutBytes(inner)
	if !ok || string(subject) != m.Subject {
		return errMoved
	}
	hdr, body, ok := cutBytes(rest)
	if !ok {
		return errForged // authenticated, yet malformed: not a broker's
	}
	h, err := parseHeader(hdr)
	if err != nil {
		return errForged
	}
	fk := freshKey{sender: sender(m), inst: [4]byte(nonce[:4])}
	if f.last == nil {
		f.last = map[freshKey]int64{}
	}
	if stamp <= f.last[fk] {
		return errReplayed
	}
	f.last[fk] = stamp
	if now.Sub(f.swept) > BusKeyWindow { // a process's entry outlives its window: stamps older are refused anyway
		for key, s := range f.last {
			if now.UnixNano()-s > int64(BusKeyWindow) {
				delete(f.last, key)
			}
		}
		f.swept = now
	}
	m.Header, m.Data = h, body
	return nil
}

// cutBytes splits b after a uvarint length and that many bytes.
func cutBytes(b []byte) (field, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

// appendHeader appends h as a uvarint length and, for each value, its
// key and the value, each a uvarint length and bytes.
func appendHeader(dst []byte, h nats.Header) []byte {
	n := 0
	for key, vs := range h {
		for _, v := range vs {
			n += uvarintLen(len(key)) + len(key) + uvarintLen(len(v)) + len(v)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	for key, vs := range h {
		for _, v := range vs {
			dst = binary.AppendUvarint(dst, uint64(len(key)))
			dst = append(dst, key...)
			dst = binary.AppendUvarint(dst, uint64(len(v)))
			dst = append(dst, v...)
		}
	}
	return dst
}

func parseHeader(b []byte) (nats.Header, error) {
	if len(b) == 0 {
		return nil, nil
	}
	h := nats.Header{}
	for len(b) > 0 {
		key, rest, ok := cutBytes(b)
		if !ok {
			return nil, errForged
		}
		v, rest, ok := cutBytes(rest)
		if !ok {
			return nil, errForged
		}
		h[string(key)] = append(h[string(key)], string(v))
		b = rest
	}
	return h, nil
}

func uvarintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n))
}

// publishing is the order of the messages of the subjects many goroutines
// publish on: a stamp, its envelope and its publication happen under mu,
// so every subscription gets one sender's messages in stamp order. (A
// link's and a credit's messages each come from one goroutine, which
// keeps that order by itself.)
type publishing struct {
	mu  sync.Mutex
	buf []byte
}

// publish sends body with headers hdr (nil: none) on subject, in an
// envelope when the bus has a key.
func (cl *cluster) publish(subject string, hdr nats.Header, body []byte) error {
	if cl.key == nil {
		if hdr == nil {
			return cl.nc.Publish(subject, body)
		}
		return cl.nc.PublishMsg(&nats.Msg{Subject: subject, Header: hdr, Data: body})
	}
	p := &cl.pub
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = cl.key.wrap(p.buf[:0], subject, hdr, body)
	err := cl.nc.Publish(subject, p.buf) // the NATS client copies it
	if cap(p.buf) > retainLinkMsg {
		p.buf = nil
	}
	return err
}

// guarded is h behind the bus key: a message that fails it is dropped,
// counted and logged; one that passes reaches h with its own data and
// headers.
func (cl *cluster) guarded(h nats.MsgHandler) nats.MsgHandler {
	if cl.key == nil {
		return h
	}
	f := &freshness{}
	return func(m *nats.Msg) {
		if err := cl.key.open(m, f, time.Now()); err != nil {
			cl.b.stats.drop(DropBusKey)
			cl.b.refusals.Warn("bus: refused a NATS message", "", "err", err.Error(), "subject", clip(m.Subject))
			return
		}
		h(m)
	}
}

// ReadBusKey reads a bus key file for ClusterOptions.BusKey: a regular
// file only its owner may read or write, as credentials are, of
// BusKeyMinBytes to BusKeyMaxBytes (white space around it is not counted).
func ReadBusKey(path string) ([]byte, error) {
	data, err := auth.ReadSecretFile(path, BusKeyMaxBytes+64) // room for white space: newBusKey checks the key itself
	if err != nil {
		return nil, fmt.Errorf("bus key: %w", err)
	}
	if _, err := newBusKey(data, false); err != nil {
		return nil, fmt.Errorf("bus key %s: %v", path, strings.TrimPrefix(err.Error(), "broker: Cluster.BusKey "))
	}
	return data, nil
}
