package wire

import (
	"bytes"
	"fmt"
	"strconv"
)

// The relay's commands on a broker connection: durable, end-to-end-sealed
// delivery (docs/durable.md#the-relay-on-the-broker-connection). The
// bodies are opaque sealed blobs; the relay reads only the recipient in a
// blob's clear header.
const (
	// CmdDurablePush is a request whose body is one sealed blob. The
	// answer (rc 0) carries, as its body, the blob's sequence in the
	// recipient's inbox, and comes only once the blob is on disk.
	CmdDurablePush = "bus.durable.push"
	// CmdDurableReceive is a request that starts a receive session for
	// one device on this connection; its body is a DurableReceive.
	CmdDurableReceive = "bus.durable.receive"
	// CmdDurableDeliver is an event from the broker: one blob of the
	// session's inbox, its sequence in the id header, the blob as body.
	CmdDurableDeliver = "bus.durable.deliver"
	// CmdDurableAck is a request whose body is the decimal sequences of
	// delivered blobs, as ranges ("7", "3-9,12": see ParseSeqRanges): the
	// relay deletes them from the session's inbox.
	CmdDurableAck = "bus.durable.ack"
	// CmdDurableInbox is a request with a DurableReceive body (the same
	// proof of the device's key): the answer is the device's inbox at the
	// relay, a DurableInbox.
	CmdDurableInbox = "bus.durable.inbox"
	// CmdDurableEnded is an event from the broker: the receive session
	// opened by the request whose id the event's id header repeats has
	// ended for the reason its DurableEnded body gives. It is sent when a
	// newer session of the same device took over (DurableEndedTakeover),
	// or a blob was lost on its way from the device's home
	// (DurableEndedLost),
	// so the older receiver can say so instead of waiting for blobs that
	// will never come.
	CmdDurableEnded = "bus.durable.ended"
)

// DurableEnded is the body of bus.durable.ended.
type DurableEnded struct {
	Reason string `json:"reason"` // DurableEndedTakeover or DurableEndedLost
}

// DurableEndedTakeover: a newer receive session of the same device,
// from any connection to any broker of the bus, ended this one.
const DurableEndedTakeover = "takeover"

// DurableEndedLost: the session went through a broker that is not the
// device's home, and a blob the home sent it was lost between brokers;
// the session ends rather than deliver the next one ahead of it. A new
// session delivers both, in order.
const DurableEndedLost = "lost"

// DurableWindow bounds the blobs a receive session has delivered and not
// yet seen acked: the relay sends the next only once an earlier one is
// acked, so a receiver needs room for this many (and a device may hold up
// to 100 blobs of a newer version unacked and still receive).
const DurableWindow = 1024

// The relay's refusals of a push, which carry no content. TOO_LARGE and
// MALFORMED (ResultTooLarge, ResultMalformed) are permanent; these are
// temporary: the sender keeps the entry and retries.
const (
	ResultInboxFull   Result = "INBOX_FULL"
	ResultRateLimited Result = "RATE_LIMITED"
	ResultUnavailable Result = "UNAVAILABLE"
	ResultInternal    Result = "INTERNAL"
)

// DurableReceive is the body of bus.durable.receive: the device, its
// public key (seal.Public.Bytes(), from which the device id is derived),
// and its proof (seal.Identity.ProveReceive) that the connection holds
// the device's key.
type DurableReceive struct {
	Device string `json:"device"`
	Public []byte `json:"public"`
	Sig    []byte `json:"sig"`
}

// DurableInbox is the answer to bus.durable.inbox: what the relay holds
// for the device.
type DurableInbox struct {
	Blobs int   `json:"blobs"`
	Bytes int64 `json:"bytes"`
}

// HeaderPipelined marks a bus.durable.push sent without waiting for the
// answers to the pushes before it on the connection: a pipeline. The
// first push of a pipeline says PipelineFirst, each later one
// PipelineNext. The relay refuses a PipelineNext push, with the same
// code, if a push of the connection's pipeline was refused temporarily
// since its PipelineFirst, so a refused entry is never overtaken by the
// entries sent behind it. A push without the header is on its own: it
// neither starts, joins nor breaks a pipeline. A connection carries one
// pipeline at a time.
const (
	HeaderPipelined = "pipelined"
	PipelineFirst   = "first"
	PipelineNext    = "next"
)

// MaxAckRanges bounds the ranges of one bus.durable.ack: as many as the
// blobs a session may have delivered and not yet seen acked, so any set of
// them fits one ack.
const MaxAckRanges = DurableWindow

// SeqRange is the sequences Lo..Hi of one inbox, both included.
type SeqRange struct{ Lo, Hi uint64 }

// SeqRanges folds seqs, in increasing order, into ranges of consecutive
// sequences (an ack body for them).
func SeqRanges(seqs []uint64) []SeqRange {
	var rs []SeqRange
	for _, s := range seqs {
		if n := len(rs); n > 0 && rs[n-1].Hi+1 == s {
			rs[n-1].Hi = s
			continue
		}
		rs = append(rs, SeqRange{s, s})
	}
	return rs
}

// AppendSeqRanges appends the ack body of rs: ranges separated by commas,
// each "N" or "LO-HI" ("7", "3-9,12").
func AppendSeqRanges(dst []byte, rs []SeqRange) []byte {
	for i, r := range rs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, r.Lo, 10)
		if r.Hi != r.Lo {
			dst = append(dst, '-')
			dst = strconv.AppendUint(dst, r.Hi, 10)
		}
	}
	return dst
}

// ParseSeqRanges reads an ack body (see AppendSeqRanges): at least one and
// at most MaxAckRanges ranges, each of decimal sequences from 1 with
// LO ≤ HI. Anything else is an error matching ErrMalformed.
func ParseSeqRanges(b []byte) ([]SeqRange, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: an empty ack", ErrMalformed)
	}
	n := bytes.Count(b, []byte{','}) + 1
	if n > MaxAckRanges {
		return nil, fmt.Errorf("%w: an ack of %d ranges, more than %d (MaxAckRanges)", ErrMalformed, n, MaxAckRanges)
	}
	rs := make([]SeqRange, 0, n)
	for part := range bytes.SplitSeq(b, []byte{','}) {
		lo, hi, isRange := bytes.Cut(part, []byte{'-'})
		r := SeqRange{}
		var err error
		if r.Lo, err = parseSeq(lo); err != nil {
			return nil, err
		}
		r.Hi = r.Lo
		if isRange {
			if r.Hi, err = parseSeq(hi); err != nil {
				return nil, err
			}
			if r.Hi < r.Lo {
				return nil, fmt.Errorf("%w: ack range %s ends before it starts", ErrMalformed, part)
			}
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// parseSeq reads one decimal sequence: digits only, no sign, from 1.
func parseSeq(b []byte) (uint64, error) {
	if len(b) == 0 || len(b) > 20 || b[0] < '1' || b[0] > '9' {
		return 0, fmt.Errorf("%w: %q is not a blob's sequence", ErrMalformed, b)
	}
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a blob's sequence", ErrMalformed, b)
	}
	return v, nil
}

// AppendDurableDeliver appends the stream frame of a bus.durable.deliver
// event carrying blob as sequence seq: the bytes AppendFrame makes of
// New(TypeEvent, CmdDurableDeliver) with the id header seq and the body
// blob, without copying blob into a message first (the relay sends every
// blob it delivers through here).
func AppendDurableDeliver(dst []byte, seq uint64, blob []byte) ([]byte, error) {
	m := New(TypeEvent, CmdDurableDeliver)
	m.Set(HeaderID, strconv.FormatUint(seq, 10))
	m.body = blob // read only, by AppendFrame
	return AppendFrame(dst, m)
}
