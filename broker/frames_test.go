package broker_test

// Frames the broker cannot route: a malformed frame gets an error frame
// and the connection stays; an oversize one closes the connection, before
// the broker reads it; other nodes are unaffected.

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestMalformedAndOversizeFrames: the broker answers with an error frame,
// stays up, and other nodes are unaffected.
func TestMalformedAndOversizeFrames(t *testing.T) {
	e := testbroker.Start(t, "tcp", testOpts())
	a := connect(t, e, "alpha")
	b := connect(t, e, "beta")
	if _, err := a.Scope("s").Channel("echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "mallory", "local", e.Secrets["local"])

	bad := []byte("---\nbad header\n---\n")
	r.SendBytes(t, append(binary.BigEndian.AppendUint32(nil, uint32(len(bad))), bad...))
	m := r.Read(t)
	if m.Value(wire.HeaderCommand) != wire.CmdError || m.Value(wire.HeaderResult) != string(wire.ResultMalformed) || !strings.Contains(m.Value(wire.HeaderError), "line 2") {
		t.Fatalf("malformed: %q", m)
	}
	// Still connected: a valid frame is still served.
	r.Send(t, wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderID, "e1").WithHeader(wire.HeaderTo, "alpha"))
	if m := r.Read(t); m.Value(wire.HeaderResult) != string(wire.NoSubscriber) {
		t.Fatalf("after malformed: %q", m)
	}
	// An event without an id cannot be answered: an error frame.
	r.Send(t, wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderTo, "alpha"))
	if m := r.Read(t); m.Value(wire.HeaderResult) != string(wire.ResultMalformed) {
		t.Fatalf("no id: %q", m)
	}
	// Oversize: the broker says so and closes.
	r.SendBytes(t, binary.BigEndian.AppendUint32(nil, wire.MaxMessageBytes+1))
	m = r.Read(t)
	if m.Value(wire.HeaderResult) != string(wire.ResultTooLarge) {
		t.Fatalf("oversize: %q", m)
	}
	if _, err := r.ReadErr(); err == nil {
		t.Fatal("connection still open after an oversize frame")
	}
	// Others are unaffected.
	if _, err := b.Scope("s").Channel("echo").Request(ctxT(t, 5*time.Second), "alpha", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if s := e.Broker.Stats(); s.Malformed < 3 {
		t.Fatalf("malformed counted %d", s.Malformed)
	}
}

// TestFrameLimitFollowsMaxPayload: the broker refuses, before reading it,
// a frame longer than MaxPayload + MaxFrameOverhead; a frame at that size
// is read (and its too-large payload refused as a message).
func TestFrameLimitFollowsMaxPayload(t *testing.T) {
	const maxPayload = 1024
	e := testbroker.Start(t, "unix", broker.Options{MaxPayload: maxPayload})
	limit := maxPayload + broker.MaxFrameOverhead
	frame := func(size int) []byte {
		t.Helper()
		m := wire.New(wire.TypeRequest, "x").WithHeader(wire.HeaderID, "r1").WithHeader(wire.HeaderTo, "nobody")
		base := len(m.ToBytes())
		b := m.WithBody(bytes.Repeat([]byte("p"), size-base)).ToBytes()
		if len(b) != size {
			t.Fatalf("built %d bytes, want %d", len(b), size)
		}
		return append(binary.BigEndian.AppendUint32(nil, uint32(size)), b...)
	}
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "big", "local", e.Secrets["local"])
	r.SendBytes(t, frame(limit))
	if m := r.Read(t); m.Value(wire.HeaderReplyTo) != "r1" || m.Value(wire.HeaderResult) != string(wire.ResultRejected) {
		t.Fatalf("a frame at the limit: %q", m)
	}
	r.SendBytes(t, binary.BigEndian.AppendUint32(nil, uint32(limit+1)))
	if m := r.Read(t); m.Value(wire.HeaderResult) != string(wire.ResultTooLarge) {
		t.Fatalf("a frame one byte past the limit: %q", m)
	}
	if _, err := r.ReadErr(); err == nil {
		t.Fatal("connection still open after an oversize frame")
	}
}
