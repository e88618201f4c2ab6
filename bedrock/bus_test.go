package bedrock

// The bedrock bus on a simulated world: delivery, loopback, the flush rate,
// send failures, stopping, twins, chunking of hard strings and groups that
// never complete.

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// node is a bus on a world, recording what its handlers get.
type node struct {
	*Bus
	mu  sync.Mutex
	got []*Envelope
}

func newNode(t *testing.T, clock *SimClock, w *World, self, iid string) *node {
	t.Helper()
	b, err := New(Options{SelfID: self, InstanceID: iid, Medium: w, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{Bus: b}
	for _, typ := range []string{"ping", TypeRequest, TypeResponse} {
		b.On(typ, func(e *Envelope) {
			n.mu.Lock()
			n.got = append(n.got, e)
			n.mu.Unlock()
		})
	}
	b.Start()
	t.Cleanup(b.Stop)
	return n
}

func (n *node) received() []*Envelope {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Envelope(nil), n.got...)
}

func TestBusDelivery(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	a := newNode(t, clock, w, "lights", "a1")
	b := newNode(t, clock, w, "door", "b1")
	c := newNode(t, clock, w, "fan", "c1")
	mid, err := a.Send(SendOptions{Type: "ping", Data: json.RawMessage(`{"n":1}`)})
	if err != nil || mid != "a1/1" {
		t.Fatalf("mid %q %v", mid, err)
	}
	if mid, _ := a.Send(SendOptions{Type: "ping", Dst: "door"}); mid != "a1/2" {
		t.Fatalf("second mid %q", mid)
	}
	if a.QueueSize() != 2 || w.Sent() != 0 {
		t.Fatal("nothing leaves inline")
	}
	clock.Advance(2)
	if got := b.received(); len(got) != 2 || string(got[0].Data) != `{"n":1}` || got[0].Src != "lights" || got[1].Dst != "door" {
		t.Fatalf("door got %+v", got)
	}
	if got := c.received(); len(got) != 1 { // the one addressed to door is not for fan
		t.Fatalf("fan got %d", len(got))
	}
	if len(a.received()) != 0 || a.Stats().Echoes != 2 || c.Stats().NotForUs != 1 {
		t.Fatalf("echoes %+v, fan %+v", a.Stats(), c.Stats())
	}
	// Reply goes to the sender only.
	if _, err := b.Reply(b.received()[0], "ping", nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2)
	if len(a.received()) != 1 || len(c.received()) != 1 {
		t.Fatal("reply not direct")
	}
}

func TestBusLoopback(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	a := newNode(t, clock, w, "lights", "a1")
	if _, err := a.Send(SendOptions{Type: "ping", Dst: "lights", Data: json.RawMessage(`"self"`)}); err != nil {
		t.Fatal(err)
	}
	if len(a.received()) != 0 {
		t.Fatal("loopback ran inline")
	}
	clock.Advance(1)
	if got := a.received(); len(got) != 1 || string(got[0].Data) != `"self"` || got[0].Dst != "lights" {
		t.Fatalf("loopback got %+v", got)
	}
	if w.Sent() != 0 || a.QueueSize() != 0 {
		t.Fatal("loopback went over the medium")
	}
}

func TestBusFlushRate(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	a := newNode(t, clock, w, "big", "z")
	b := newNode(t, clock, w, "rx", "r")
	// One envelope of 120 frames (≈ 978 code units each).
	payload, _ := json.Marshal(strings.Repeat("x", 120*978-200))
	if _, err := a.Send(SendOptions{Type: "ping", Data: payload}); err != nil {
		t.Fatal(err)
	}
	frames := a.QueueSize()
	if frames < 110 {
		t.Fatalf("%d frames", frames)
	}
	for tick := 1; a.QueueSize() > 0; tick++ {
		clock.Advance(1)
		if want := min(frames, tick*MaxFlushPerTick); int(w.Sent()) != want {
			t.Fatalf("tick %d: %d frames sent, want %d", tick, w.Sent(), want)
		}
	}
	clock.Advance(1)
	if got := b.received(); len(got) != 1 || string(got[0].Data) != string(payload) {
		t.Fatal("the big message did not arrive whole")
	}
}

func TestBusSendFailureDropped(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{MaxLen: 500})
	a := newNode(t, clock, w, "a", "a")
	b := newNode(t, clock, w, "b", "b")
	small, _ := json.Marshal("ok")
	big, _ := json.Marshal(strings.Repeat("y", 800)) // one frame, over the world's cap
	a.Send(SendOptions{Type: "ping", Data: big})
	a.Send(SendOptions{Type: "ping", Data: small})
	clock.Advance(3)
	if s := a.Stats(); s.SendFailures != 1 || s.Sent != 1 {
		t.Fatalf("stats %+v", s)
	}
	if got := b.received(); len(got) != 1 || string(got[0].Data) != `"ok"` {
		t.Fatalf("got %+v", got)
	}
}

func TestBusStopKeepsHandlers(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	a := newNode(t, clock, w, "a", "a")
	b := newNode(t, clock, w, "b", "b")
	b.Stop()
	a.Send(SendOptions{Type: "ping"})
	clock.Advance(3)
	if len(b.received()) != 0 {
		t.Fatal("a stopped bus received")
	}
	b.Start()
	b.Start() // idempotent
	a.Send(SendOptions{Type: "ping"})
	clock.Advance(3)
	if len(b.received()) != 1 {
		t.Fatalf("restarted bus got %d", len(b.received()))
	}
	// A stopped bus keeps its queue and sends it once started.
	a.Stop()
	a.Send(SendOptions{Type: "ping"})
	clock.Advance(3)
	if a.QueueSize() != 1 || len(b.received()) != 1 {
		t.Fatal("a stopped bus flushed")
	}
	a.Start()
	clock.Advance(3)
	if len(b.received()) != 2 {
		t.Fatal("queue lost across stop")
	}
	// Unsubscribe.
	var n int
	off := b.On("other", func(*Envelope) { n++ })
	a.Send(SendOptions{Type: "other"})
	clock.Advance(3)
	off()
	a.Send(SendOptions{Type: "other"})
	clock.Advance(3)
	if n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

// TestCollidingTwinsHearEachOther: two instances with the same src are
// not each other's echoes.
func TestCollidingTwinsHearEachOther(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	t1 := newNode(t, clock, w, "lights", "one")
	t2 := newNode(t, clock, w, "lights", "two")
	t1.Send(SendOptions{Type: "ping"})
	t2.Send(SendOptions{Type: "ping", Dst: "lights"}) // loopback for t2, never on the medium
	clock.Advance(3)
	if len(t2.received()) != 2 || len(t1.received()) != 0 {
		t.Fatalf("twins: one got %d, two got %d", len(t1.received()), len(t2.received()))
	}
	t1.Send(SendOptions{Type: "ping", Dst: "lights", MID: "custom"}) // loopback too
	clock.Advance(2)
	if got := t1.received(); len(got) != 1 || got[0].MID != "custom" {
		t.Fatal("custom mid")
	}
}

// TestStringsRoundTripThroughTheBus: every hard string survives chunking
// over the medium between Go nodes, in both directions.
func TestStringsRoundTripThroughTheBus(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{Reorder: true, Seed: 7})
	a := newNode(t, clock, w, "a", "a")
	b := newNode(t, clock, w, "b", "b")
	hard := []string{
		"", `"`, `\`, "\x00\x01\x1f\x7f", "\u2028\u2029<>&", "😀", strings.Repeat("😀", 1500),
		strings.Repeat(`"\`, 1200), "café 中文 " + strings.Repeat("é", 3000), strings.Repeat("\n\t", 999),
	}
	for i, s := range hard {
		data, _ := json.Marshal(s)
		from, to := a, b
		if i%2 == 1 {
			from, to = b, a
		}
		before := len(to.received())
		from.Send(SendOptions{Type: "ping", Data: data})
		clock.Advance(40)
		got := to.received()
		if len(got) != before+1 {
			t.Fatalf("%d: not delivered", i)
		}
		var back string
		if err := json.Unmarshal(got[before].Data, &back); err != nil || back != s {
			t.Fatalf("%d: %q came back as %q (%v)", i, s, back, err)
		}
	}
}

// TestIncompleteGroupExpires: on a world that loses one frame, the group
// never completes and is swept 200 ticks after its last frame.
func TestIncompleteGroupExpires(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	b := newNode(t, clock, w, "b", "b")
	frames, _ := Split("x/1", strings.Repeat("z", 3000))
	for _, f := range frames[:len(frames)-1] {
		w.Send(ChannelID, EncodeFrame(f))
	}
	clock.Advance(1)
	start := clock.Now()
	if b.reasm.Pending() != 1 {
		t.Fatal("group not pending")
	}
	// Sweeps run every 20 ticks (at 20, 40, …); the group's expiry is tick
	// start+200, so the sweep at 200 keeps it and the one at 220 drops it.
	for clock.Now() < start+ChunkTTLTicks-1 {
		clock.Advance(1)
	}
	if b.reasm.Pending() != 1 {
		t.Fatalf("expired before %d ticks", ChunkTTLTicks)
	}
	clock.Advance(EvictionIntervalTicks)
	if b.reasm.Pending() != 0 || b.Stats().GroupsExpired != 1 {
		t.Fatalf("not swept: %+v", b.Stats())
	}
	// Garbage on the channel and other channels is dropped and counted.
	w.Send(ChannelID, "not json")
	w.Send(ChannelID, `{"c":"g","s":0,"t":1,"p":"{\"v\":2,\"src\":\"a\",\"iid\":\"i\",\"type\":\"ping\",\"mid\":\"m\"}"}`)
	w.Send("other:channel", EncodeFrame(Frame{C: "q", S: 0, T: 1, P: units(`{"v":1,"src":"a","iid":"i","type":"ping","mid":"m"}`)}))
	clock.Advance(1)
	if s := b.Stats(); s.BadFrames != 1 || s.BadEnvelopes != 1 || len(b.received()) != 0 {
		t.Fatalf("stats %+v, got %d", s, len(b.received()))
	}
}
