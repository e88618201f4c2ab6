package broker_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/relay"
	"busbar/seal"
	"busbar/wire"
)

// steppingClock moves on by step each time it is read: the relay reads
// it once per push it admits, so a push rate of one a second with a burst
// of one takes every second push of a run.
type steppingClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

// Pushes sent in one write, without waiting for answers, are stored in the
// order sent; behind a push refused temporarily, every push of the
// pipeline is refused with the same code, even one the rate would have
// let in, until a push starts a new pipeline. A push outside the pipeline
// is on its own.
func TestPipelinedPushesKeepOrderAcrossARefusal(t *testing.T) {
	clock := &steppingClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), step: 500 * time.Millisecond}
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir(),
		Relay: relay.Options{MaxPushRate: 1, PushBurst: 1, Now: clock.Now}})
	alice, bob := identity(t), identity(t)
	sender := e.DialRaw(t)
	sender.Hello(t, wire.ProtocolVersion, "sender", "local", e.Secrets["local"])
	type push struct{ id, pipe, want string }
	pushes := []push{
		{"p0", wire.PipelineFirst, "0"},
		{"p1", wire.PipelineNext, string(wire.ResultRateLimited)}, // the rate
		{"p2", wire.PipelineNext, string(wire.ResultRateLimited)}, // behind p1: the rate would take it
		{"p3", wire.PipelineNext, string(wire.ResultRateLimited)}, // behind p1
		{"q", "", "0"}, // on its own: taken
		{"p4", wire.PipelineNext, string(wire.ResultRateLimited)},  // still behind p1
		{"p5", wire.PipelineFirst, string(wire.ResultRateLimited)}, // a new pipeline, over the rate
		{"p6", wire.PipelineFirst, "0"},                            // a new pipeline, within it
	}
	var frames []byte
	for _, p := range pushes {
		m := wire.New(wire.TypeRequest, wire.CmdDurablePush).WithHeader(wire.HeaderID, p.id).
			WithBody(sealedTo(t, alice, bob, p.id))
		if p.pipe != "" {
			m.Set(wire.HeaderPipelined, p.pipe)
		}
		var err error
		if frames, err = wire.AppendFrame(frames, m); err != nil {
			t.Fatal(err)
		}
	}
	sender.SendBytes(t, frames) // one write: none waits for an answer
	got := map[string]*wire.Message{}
	for len(got) < len(pushes) {
		m := sender.Read(t)
		got[m.Value(wire.HeaderReplyTo)] = m
	}
	var stored []string
	for _, p := range pushes {
		m := got[p.id]
		res := m.Value(wire.HeaderRC)
		if res != "0" {
			res = m.Value(wire.HeaderResult)
		} else {
			stored = append(stored, p.id)
		}
		if res != p.want {
			t.Errorf("push %s (%q): %s %s, want %s", p.id, p.pipe, res, m.Value(wire.HeaderError), p.want)
		}
	}
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "bob", "local", e.Secrets["local"])
	if m := receive(t, r, "rx", bob, r.Info.Nonce); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("receive: %v", m)
	}
	for _, want := range stored {
		d := r.Read(t)
		if body := openedBody(t, bob, alice, d.Body()); body != want {
			t.Fatalf("delivered %q, want %q (stored in order: %v)", body, want, stored)
		}
	}
}

// One ack names many delivered blobs as ranges; it deletes only blobs the
// session delivered, each ack frees room in the delivery window, and an
// ack that deletes nothing is refused.
func TestAckRangesDeleteDeliveredBlobs(t *testing.T) {
	// More pushes than the default burst: the rate is not what is tested.
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir(), Relay: relay.Options{MaxPushRate: -1}})
	alice, bob := identity(t), identity(t)
	sender := e.DialRaw(t)
	sender.Hello(t, wire.ProtocolVersion, "sender", "local", e.Secrets["local"])
	pushEach(t, sender, alice, bob, wire.DurableWindow+10)
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "bob", "local", e.Secrets["local"])
	if m := receive(t, r, "rx", bob, r.Info.Nonce); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("receive: %v", m)
	}
	var seqs []uint64
	for range wire.DurableWindow { // the window: no more until an ack
		d := r.Read(t)
		var seq uint64
		fmt.Sscan(d.Value(wire.HeaderID), &seq)
		seqs = append(seqs, seq)
	}
	// A range reaching past the last delivered blob deletes up to it only;
	// the window reopens and the other 10 come.
	window := wire.SeqRange{Lo: seqs[0], Hi: seqs[len(seqs)-1]}
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdDurableAck).WithHeader(wire.HeaderID, "a1").
		WithBody(wire.AppendSeqRanges(nil, []wire.SeqRange{{Lo: window.Lo, Hi: window.Hi + 1000}})))
	var rest []uint64
	answered := false
	for len(rest) < 10 || !answered {
		m := r.Read(t)
		switch {
		case m.Value(wire.HeaderReplyTo) == "a1":
			if m.Value(wire.HeaderRC) != "0" {
				t.Fatalf("ack a1: %v", m)
			}
			answered = true
		case m.Value(wire.HeaderCommand) == wire.CmdDurableDeliver:
			var seq uint64
			fmt.Sscan(m.Value(wire.HeaderID), &seq)
			if seq <= window.Hi {
				t.Fatalf("blob %d delivered again in the same session", seq)
			}
			rest = append(rest, seq)
		}
	}
	if m := ask(t, r, wire.CmdDurableAck, "a2", wire.AppendSeqRanges(nil, []wire.SeqRange{window})); m.Value(wire.HeaderResult) != string(wire.ResultRejected) {
		t.Fatalf("acking the window again: %v, want REJECTED", m)
	}
	body := wire.AppendSeqRanges(nil, wire.SeqRanges(rest))
	if m := ask(t, r, wire.CmdDurableAck, "a3", body); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("ack %s: %v", body, m)
	}
	if m := ask(t, r, wire.CmdDurableAck, "a4", []byte("1-2-3")); m.Value(wire.HeaderResult) != string(wire.ResultRejected) {
		t.Fatalf("a malformed ack: %v, want REJECTED", m)
	}
	proof, _ := json.Marshal(wire.DurableReceive{Device: bob.ID().String(), Public: bob.Public().Bytes(), Sig: bob.ProveReceive(r.Info.Nonce)})
	m := ask(t, r, wire.CmdDurableInbox, "in", proof)
	var in wire.DurableInbox
	if err := json.Unmarshal(m.Body(), &in); err != nil || in.Blobs != 0 {
		t.Fatalf("bob's inbox after every ack: %s (%v), want no blob", m.Body(), err)
	}
}

// openedBody opens a blob sealed by sealedTo from from to to.
func openedBody(t *testing.T, to, from *seal.Identity, blob []byte) string {
	t.Helper()
	in, err := seal.Open(to, blob, seal.SendersFunc(func(string, seal.DeviceID) (seal.Public, bool) { return from.Public(), true }))
	if err != nil {
		t.Fatalf("opening a delivery: %v", err)
	}
	return string(in.Body)
}

// A connection that goes away with pushes outstanding: what the relay
// admitted is stored, in the order sent (a prefix of the pipeline), and
// nothing waits for the answers nobody will read (the leak check of
// TestMain and the broker's Shutdown at cleanup hold it to that).
func TestPipelineCutByADisconnectStoresAPrefix(t *testing.T) {
	e := relayBroker(t)
	alice, bob := identity(t), identity(t)
	sender := e.DialRaw(t)
	sender.Hello(t, wire.ProtocolVersion, "sender", "local", e.Secrets["local"])
	const n = 200
	var frames []byte
	for i := range n {
		m := wire.New(wire.TypeRequest, wire.CmdDurablePush).WithHeader(wire.HeaderID, fmt.Sprint("p", i)).
			WithHeader(wire.HeaderPipelined, wire.PipelineNext).WithBody(sealedTo(t, alice, bob, fmt.Sprint(i)))
		if i == 0 {
			m.Set(wire.HeaderPipelined, wire.PipelineFirst)
		}
		var err error
		if frames, err = wire.AppendFrame(frames, m); err != nil {
			t.Fatal(err)
		}
	}
	sender.SendBytes(t, frames)
	sender.Conn.Close()
	// The sender leaves the directory only after every push it admitted
	// was committed and answered (conn.endDurable).
	testbroker.Eventually(t, 10*time.Second, "the sender's connection to end", func() bool {
		return !slices.ContainsFunc(e.Broker.Directory(), func(n wire.NodeInfo) bool { return n.Node == "sender" })
	})
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "bob", "local", e.Secrets["local"])
	proof, _ := json.Marshal(wire.DurableReceive{Device: bob.ID().String(), Public: bob.Public().Bytes(), Sig: bob.ProveReceive(r.Info.Nonce)})
	var in wire.DurableInbox
	if err := json.Unmarshal(ask(t, r, wire.CmdDurableInbox, "in", proof).Body(), &in); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, r, "rx", bob, r.Info.Nonce); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("receive: %v", m)
	}
	for i := 0; i < in.Blobs; {
		m := r.Read(t)
		if m.Value(wire.HeaderCommand) != wire.CmdDurableDeliver {
			continue
		}
		if body := openedBody(t, bob, alice, m.Body()); body != fmt.Sprint(i) {
			t.Fatalf("delivery %d is %q: not the pipeline's prefix in order", i, body)
		}
		i++
	}
	t.Logf("%d of %d pushes stored before the disconnect", in.Blobs, n)
}

// An ack sent as an event deletes what it names and frees the window like
// an ack request, and is never answered, not even when it names nothing.
func TestAckEventsAreNotAnswered(t *testing.T) {
	e := relayBroker(t)
	alice, bob := identity(t), identity(t)
	sender := e.DialRaw(t)
	sender.Hello(t, wire.ProtocolVersion, "sender", "local", e.Secrets["local"])
	pushEach(t, sender, alice, bob, 3)
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "bob", "local", e.Secrets["local"])
	if m := receive(t, r, "rx", bob, r.Info.Nonce); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("receive: %v", m)
	}
	for range 3 {
		if m := r.Read(t); m.Value(wire.HeaderCommand) != wire.CmdDurableDeliver {
			t.Fatalf("expected a delivery: %v", m)
		}
	}
	for _, body := range []string{"1-2", "1-2", "junk"} { // the second and third delete nothing
		r.Send(t, wire.New(wire.TypeEvent, wire.CmdDurableAck).WithBody([]byte(body)))
	}
	// The next frame bob reads is the answer to this request: nothing
	// came for the events, and the inbox holds the one blob not acked.
	proof, _ := json.Marshal(wire.DurableReceive{Device: bob.ID().String(), Public: bob.Public().Bytes(), Sig: bob.ProveReceive(r.Info.Nonce)})
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdDurableInbox).WithHeader(wire.HeaderID, "in").WithBody(proof))
	m := r.Read(t)
	if m.Value(wire.HeaderReplyTo) != "in" {
		t.Fatalf("read %v, want the inbox answer: an ack event was answered", m)
	}
	var in wire.DurableInbox
	if err := json.Unmarshal(m.Body(), &in); err != nil || in.Blobs != 1 {
		t.Fatalf("inbox %s (%v), want 1 blob", m.Body(), err)
	}
}

// pushEach pushes n blobs from alice to bob with bodies "0", "1", …, each
// waiting for its answer, which must be rc 0.
func pushEach(t *testing.T, r *testbroker.Raw, alice, bob *seal.Identity, n int) {
	t.Helper()
	for i := range n {
		if m := ask(t, r, wire.CmdDurablePush, fmt.Sprint("p", i), sealedTo(t, alice, bob, fmt.Sprint(i))); m.Value(wire.HeaderRC) != "0" {
			t.Fatalf("push %d: %v", i, m)
		}
	}
}
