package broker

// Regression tests from the review of issue 5 (discovery and state): each
// test's comment describes the defect it caught; all are fixed.

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"busbar/state"
	"busbar/wire"
)

// ask sends one control request as n and returns the broker's answer.
func (n *rawNode) ask(t *testing.T, cmd, id string, body any) *wire.Message {
	t.Helper()
	raw, _ := json.Marshal(body)
	n.send(t, wire.New(wire.TypeRequest, cmd).WithHeader(wire.HeaderID, id).WithBody(raw))
	_ = n.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		m, err := n.r.ReadMessage()
		if err != nil {
			t.Fatalf("%s %s: %v", cmd, id, err)
		}
		if m.IsHeartbeat() || m.Value(wire.HeaderReplyTo) != id {
			continue
		}
		return m
	}
}

// TestReview5OpenKeyWriterExhaustsClock: any writer of an open key may
// pick the highest version (state.MaxVersion). It applies, the namespace
// clock reaches MaxVersion, and the owner's Open, which writes at
// Clock()+1, is refused for every key of the namespace from then on: a
// non-owner disables the owner's right to open keys.
func TestReview5OpenKeyWriterExhaustsClock(t *testing.T) {
	b, secret := newTestBroker(t, Options{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	owner := join(t, b, secret, "owner")
	foe := join(t, b, secret, "foe")
	t.Cleanup(func() { owner.nc.Close(); foe.nc.Close() })

	if m := owner.ask(t, wire.CmdStateOpen, "1", state.Query{NS: "ns", Key: "shared"}); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("owner open: %q", m)
	}
	m := foe.ask(t, wire.CmdStateSet, "2", state.Delta{NS: "ns", Key: "shared", Value: json.RawMessage(`2`), Version: state.MaxVersion})
	if m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("write to an open key: %q", m)
	}
	if m := owner.ask(t, wire.CmdStateOpen, "3", state.Query{NS: "ns", Key: "other"}); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("after another node wrote an open key at MaxVersion, the owner can no longer open any key: %q", m)
	}
}

// TestReview5ReplacedConnectionRecordLingers: a node's old connection has
// stopped reading (its writer is blocked on the socket) when the node
// reconnects. The old connection is closed with REPLACED, but its registry
// records go only in serveConn after its reader ends, which waits for the
// blocked writer: up to WriteTimeout. Meanwhile resolve still picks the
// dead connection and the records count in collisions (docs/discovery.md:
// "when the node ... is replaced by a newer connection of the same name
// ... its services go").
func TestReview5ReplacedConnectionRecordLingers(t *testing.T) {
	b, secret := newTestBroker(t, Options{WriteTimeout: 4 * time.Second})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	old := join(t, b, secret, "alpha")
	t.Cleanup(func() { old.nc.Close() })
	if m := old.ask(t, wire.CmdAnnounce, "a", wire.Announcement{Service: "svc"}); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("announce: %q", m)
	}
	// Ask for something and never read the answer: on a pipe the writer
	// blocks at once.
	old.send(t, wire.New(wire.TypeRequest, wire.CmdWhois).WithHeader(wire.HeaderID, "w"))
	time.Sleep(50 * time.Millisecond)
	again := join(t, b, secret, "alpha")
	t.Cleanup(func() { again.nc.Close() })
	go func() { _, _ = io.Copy(io.Discard, again.nc) }()
	start := time.Now()
	for {
		list := b.reg.services("svc")
		conns := b.reg.instances("svc")
		if len(list) == 0 {
			return
		}
		if time.Since(start) > time.Second {
			t.Fatalf("%v after alpha reconnected, the registry still holds its replaced connection's record (epoch %d, connection closing: %v)",
				time.Since(start).Round(time.Millisecond), list[0].Provenance.Epoch, conns[0].out.Closing())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
