package durable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"busbar/seal"

	bolt "go.etcd.io/bbolt"
)

// The buckets of device.db (docs/durable.md, "The outbox"):
//
//	outbox    recipient id (20) | entry seq (8)          → entry record
//	messages  message id (16)                            → message record
//	dedup     sender id (20) | message id (16)           → keep-until, Unix ms (8)
//	dedupexp  keep-until (8) | sender id | message id    → empty (the sweep's index)
//	held      relay seq (8)                              → version (2) | first held, Unix ms (8)
//	events    event seq (8)                              → event, JSON
//	meta      "eventsDropped", "eventsCount",
//	          "eventsShown"                              → count, or an event seq (8)
//	tokens    token id (16)                              → token record (the inviter's)
//	tokenexp  delete-at, Unix s (8) | token id (16)      → empty (the sweep's index, tokens.go)
//	joins     group name                                 → token text (a join waiting for its manifest)
//	pending   group | 0x00 | arrival (8)                 → a manifest kept until its signer is known (pending.go)
//
// Integers are big-endian, so keys sort in order.
var (
	bOutbox   = []byte("outbox")
	bMessages = []byte("messages")
	bDedup    = []byte("dedup")
	bDedupExp = []byte("dedupexp")
	bHeld     = []byte("held")
	bEvents   = []byte("events")
	bMeta     = []byte("meta")
	bTokens   = []byte("tokens")
	bJoins    = []byte("joins")
	bPending  = []byte("pending")
)

var errRecord = errors.New("durable: damaged record in device.db")

func createBuckets(tx *bolt.Tx) error {
	for _, b := range [][]byte{bOutbox, bMessages, bDedup, bDedupExp, bHeld, bEvents, bMeta, bTokens, bJoins, bPending} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return indexTokens(tx)
}

const recordFormat = 1

// An entry is one message queued for one recipient.
//
//	format 1 (1) | message id (16) | attempts (4) | due, Unix ns (8) | recipient Public (1249)
type entry struct {
	msg      seal.MessageID
	attempts uint32    // failed pushes so far
	due      time.Time // not pushed before; zero: at once
	to       seal.Public
}

const entrySize = 1 + seal.MessageIDSize + 4 + 8 + seal.PublicSize

func (e *entry) encode() []byte {
	b := make([]byte, 0, entrySize)
	b = append(b, recordFormat)
	b = append(b, e.msg[:]...)
	b = binary.BigEndian.AppendUint32(b, e.attempts)
	var due int64
	if !e.due.IsZero() {
		due = e.due.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(due))
	return append(b, e.to.Bytes()...)
}

func decodeEntry(b []byte) (entry, error) {
	var e entry
	if len(b) != entrySize || b[0] != recordFormat {
		return e, fmt.Errorf("%w: outbox entry of %d bytes", errRecord, len(b))
	}
	copy(e.msg[:], b[1:17])
	e.attempts = binary.BigEndian.Uint32(b[17:21])
	if due := int64(binary.BigEndian.Uint64(b[21:29])); due != 0 {
		e.due = time.Unix(0, due)
	}
	to, err := seal.ParsePublic(b[29:])
	if err != nil {
		return e, fmt.Errorf("%w: %v", errRecord, err)
	}
	e.to = to
	return e, nil
}

func entryKey(to seal.DeviceID, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), to[:]...), seq)
}

// A message record holds the inner message of one Send once, for all its
// entries, with the count of entries that still refer to it.
//
//	format 1 (1) | refs (4) | kind (1) | message id (16) | sender timestamp, Unix ms (8)
//	| group length (1) | group | body length (4) | body
type message struct {
	refs  uint32
	inner seal.Inner
}

func (m *message) encode() []byte {
	in := &m.inner
	b := make([]byte, 0, 35+len(in.Group)+len(in.Body))
	b = append(b, recordFormat)
	b = binary.BigEndian.AppendUint32(b, m.refs)
	b = append(b, byte(in.Kind))
	b = append(b, in.ID[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(in.Timestamp.UnixMilli()))
	b = append(b, byte(len(in.Group)))
	b = append(b, in.Group...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(in.Body)))
	return append(b, in.Body...)
}

func decodeMessage(b []byte) (message, error) {
	var m message
	bad := func(what string) (message, error) {
		return message{}, fmt.Errorf("%w: message record: %s", errRecord, what)
	}
	if len(b) < 31 || b[0] != recordFormat {
		return bad("short or unknown format")
	}
	m.refs = binary.BigEndian.Uint32(b[1:5])
	in := &m.inner
	in.Kind = seal.Kind(b[5])
	if in.Kind < seal.KindSync || in.Kind > seal.KindRevoke {
		return bad("unknown kind")
	}
	copy(in.ID[:], b[6:22])
	ms := int64(binary.BigEndian.Uint64(b[22:30]))
	if ms <= 0 {
		return bad("timestamp")
	}
	in.Timestamp = time.UnixMilli(ms)
	g := int(b[30])
	b = b[31:]
	if len(b) < g+4 || !seal.ValidGroupName(string(b[:g])) {
		return bad("group")
	}
	in.Group = string(b[:g])
	n := binary.BigEndian.Uint32(b[g : g+4])
	b = b[g+4:]
	if n > seal.MaxPayloadBytes || uint32(len(b)) != n {
		return bad("body length")
	}
	in.Body = append([]byte{}, b...)
	return m, nil
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func unixMilli(b []byte) time.Time {
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b)))
}
