package bedrock

// Regression tests from the review of issue 6 (the bedrock bus and its
// bridge): each test's comment describes the defect it caught; all are
// fixed. TestReview6RandomEnvelopesMatchJS cross-checks random envelopes
// against node when it is installed.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"unicode/utf16"
)

// jsCase is one case written by genJS (node): random envelopes framed as
// the JavaScript bus frames them (as testdata/golden.js does).
type jsCase struct {
	EnvJSON   string   `json:"envJSON"`
	MessyData *string  `json:"messyData"`
	Encoded   string   `json:"encoded"`
	Overhead  int      `json:"overhead"`
	Budget    int      `json:"budget"`
	Frames    []string `json:"frames"`
}

func loadJSCases(t *testing.T, js string) []jsCase {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node")
	}
	script := filepath.Join(t.TempDir(), "gen.js")
	if err := os.WriteFile(script, []byte(js), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("node", script).Output()
	if err != nil {
		t.Fatal(err)
	}
	var cases []jsCase
	if err := json.Unmarshal(out, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestReview6RandomEnvelopesMatchJS: random envelopes (random group ids
// with escapes and non-ASCII, data with lone surrogates, U+2028, nested
// values, "messy" JSON) are framed byte for byte as node frames them.
func TestReview6RandomEnvelopesMatchJS(t *testing.T) {
	for i, c := range loadJSCases(t, genJS) {
		e, err := DecodeEnvelope(units(c.EnvJSON))
		if err != nil {
			t.Fatalf("case %d: decode %q: %v", i, c.EnvJSON, err)
		}
		if o, b := Overhead(e.MID), Budget(e.MID); o != c.Overhead || b != c.Budget {
			t.Fatalf("case %d: overhead/budget %d/%d, JS %d/%d (mid %q)", i, o, b, c.Overhead, c.Budget, e.MID)
		}
		enc, err := AppendEnvelope(nil, e)
		if err != nil || string(enc) != c.Encoded {
			t.Fatalf("case %d: encoded\n%q\nJS\n%q (%v)", i, enc, c.Encoded, err)
		}
		if c.MessyData != nil {
			m := *e
			m.Data = json.RawMessage(*c.MessyData)
			enc, err := AppendEnvelope(nil, &m)
			if err != nil || string(enc) != c.Encoded {
				t.Fatalf("case %d: messy data %q encoded\n%q\nJS\n%q (%v)", i, *c.MessyData, enc, c.Encoded, err)
			}
		}
		if c.Budget < 1 {
			if _, err := Split(e.MID, string(enc)); err == nil {
				t.Fatalf("case %d: split with budget %d", i, c.Budget)
			}
			continue
		}
		frames, err := Split(e.MID, string(enc))
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		// Byte for byte up to the first surrogate pair JavaScript cuts
		// (Go keeps pairs whole, so its frames always fit).
		for k, f := range frames {
			got := EncodeFrame(f)
			if k >= len(c.Frames) || got != c.Frames[k] {
				jf, _ := DecodeFrame(c.Frames[min(k, len(c.Frames)-1)])
				if len(jf.P) == 0 || !utf16.IsSurrogate(rune(jf.P[len(jf.P)-1])) {
					t.Fatalf("case %d frame %d:\n%q\nJS\n%q", i, k, got, c.Frames[min(k, len(c.Frames)-1)])
				}
				break
			}
		}
		for k, f := range frames {
			if n := len16(EncodeFrame(f)); n > MaxMessage && c.Budget > 1 {
				t.Fatalf("case %d frame %d: %d code units", i, k, n)
			}
		}
		r := NewReassembler()
		var whole []uint16
		for k := range c.Frames {
			jf, err := DecodeFrame(c.Frames[k])
			if err != nil {
				t.Fatalf("case %d frame %d: %v", i, k, err)
			}
			if w, done := r.Add(jf, 0); done {
				whole = w
			}
		}
		if !slices.Equal(whole, units(c.Encoded)) {
			t.Fatalf("case %d: reassembled differs", i)
		}
		back, err := DecodeEnvelope(whole)
		if err != nil || back.MID != e.MID || back.Src != e.Src || back.Dst != e.Dst || back.IID != e.IID || back.Type != e.Type {
			t.Fatalf("case %d: back %+v (%v)", i, back, err)
		}
	}
}

// rawSend sends an envelope with the given raw data from a throwaway bus.
func rawBus(t *testing.T, clock *SimClock, w *World, self, iid string) *Bus {
	t.Helper()
	return newBus(t, clock, w, self, iid)
}

// TestReview6RequestKeysMatchExactly: a JavaScript server reads
// data.method; {"Method": "open"} names no method, and in
// {"method":"safe","METHOD":"open"} the method is "safe".
func TestReview6RequestKeysMatchExactly(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	server := NewRPC(newBus(t, clock, w, "calc", "c1"))
	var called []string
	for _, m := range []string{"open", "safe"} {
		server.Handle(m, func(json.RawMessage, *Envelope) (any, error) { called = append(called, m); return nil, nil })
	}
	caller := rawBus(t, clock, w, "ui", "u1")
	caller.Send(SendOptions{Dst: "calc", Type: TypeRequest, Data: json.RawMessage(`{"Method":"open"}`)})
	caller.Send(SendOptions{Dst: "calc", Type: TypeRequest, Data: json.RawMessage(`{"method":"safe","METHOD":"open"}`)})
	clock.Advance(3)
	if !slices.Equal(called, []string{"safe"}) {
		t.Fatalf("methods called %v; JavaScript (data.method) calls [safe]", called)
	}
}

// TestReview6DeltaKeysMatchExactly: a state-delta's ver is data.ver; a
// "VER" key is another property. Go replicas must store what JavaScript
// replicas store, or they never converge.
func TestReview6DeltaKeysMatchExactly(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	owner := NewState(newBus(t, clock, w, "o", "o1"), StateOptions{})
	if err := owner.Own("n"); err != nil {
		t.Fatal(err)
	}
	replica := NewState(newBus(t, clock, w, "r", "r1"), StateOptions{})
	replica.Follow("n")
	clock.Advance(5)
	twin := rawBus(t, clock, w, "o", "o2") // the owner's src, as any sender may write it
	twin.Send(SendOptions{Type: TypeStateDelta, Data: json.RawMessage(`{"ns":"n","key":"k","value":1,"ver":5,"VER":999}`)})
	clock.Advance(3)
	e, ok := replica.Get("n", "k")
	if !ok || e.Version != 5 {
		t.Fatalf("replica stored %+v (ok %v); JavaScript stores ver 5", e, ok)
	}
}

// gateClock is a SimClock whose After can be held at its start, to
// reproduce an interleaving a RealClock and a concurrent caller allow.
type gateClock struct {
	*SimClock
	entered, release chan struct{}
}

func (c *gateClock) After(n int64, f func()) func() {
	if c.entered != nil {
		close(c.entered)
		c.entered = nil
		<-c.release
	}
	return c.SimClock.After(n, f)
}

// TestReview6RPCCloseDuringGo: Close while a Go is between registering
// its call and arming its timeout (a bridge closing while a busbar
// request is being relayed) must not panic.
func TestReview6RPCCloseDuringGo(t *testing.T) {
	sim := NewSimClock()
	clock := &gateClock{SimClock: sim}
	w := NewWorld(sim, WorldOptions{})
	bus, _ := New(Options{SelfID: "ui", InstanceID: "u1", Medium: w, Clock: clock})
	bus.Start()
	defer bus.Stop()
	r := NewRPC(bus)
	clock.entered, clock.release = make(chan struct{}), make(chan struct{})
	entered := clock.entered
	done := make(chan error, 1)
	go r.Go("calc", "add", nil, 0, func(_ Response, err error) { done <- err })
	<-entered
	// Close runs concurrently (it may wait for the call's setup to finish).
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		r.Close()
	}()
	close(clock.release)
	if p := <-panicked; p != nil {
		t.Fatalf("RPC.Close panicked: %v", p)
	}
	<-done
}

// TestReview6RPCEarlyResponse: a res whose rid matches a call being set
// up (the mid is predictable: iid/counter), heard on the medium's
// goroutine, must not panic.
func TestReview6RPCEarlyResponse(t *testing.T) {
	sim := NewSimClock()
	clock := &gateClock{SimClock: sim}
	w := NewWorld(sim, WorldOptions{})
	bus, _ := New(Options{SelfID: "ui", InstanceID: "u1", Medium: w, Clock: clock})
	bus.Start()
	defer bus.Stop()
	r := NewRPC(bus)
	other := newBus(t, sim, w, "calc", "c1")
	other.Send(SendOptions{Dst: "ui", Type: TypeResponse, Data: json.RawMessage(`{"rid":"u1/1","ok":true}`)})
	sim.Advance(1) // the forged res is on the medium
	clock.entered, clock.release = make(chan struct{}), make(chan struct{})
	entered := clock.entered
	done := make(chan struct{})
	go func() { defer close(done); r.Go("calc", "add", nil, 0, func(Response, error) {}) }()
	<-entered
	// Delivered while the call is being set up (it may wait for the setup).
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		sim.Advance(1)
	}()
	close(clock.release)
	<-done
	if p := <-panicked; p != nil {
		t.Fatalf("answer panicked: %v", p)
	}
}

// TestReview6TwinSeesItsOwnCollision: the seed's reason for filtering
// echoes by iid is that "a colliding twin announcing your id is still
// delivered, which is how collisions are detectable at all": an instance
// must be able to tell that another one uses its src.
func TestReview6TwinSeesItsOwnCollision(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	var events []string
	d1 := NewDiscovery(newBus(t, clock, w, "door", "b1"), AnnounceData{Version: "1"}, func(ev PeerEvent) {
		events = append(events, ev.Op+" "+ev.Peer.Src+"/"+ev.Peer.IID)
	})
	clock.Advance(5)
	NewDiscovery(newBus(t, clock, w, "door", "b2"), AnnounceData{Version: "1"}, nil)
	clock.Advance(AnnounceIntervalTicks + 5)
	if c := d1.Collisions(); !slices.Equal(c, []string{"door"}) {
		t.Errorf("door/b1 collisions %v, events %v", c, events)
	}
	for _, p := range d1.Peers() {
		if p.IID == "b1" {
			t.Errorf("door/b1 lists itself as a peer: %+v (events %v)", d1.Peers(), events)
		}
	}
	// Both twins keep running: the collision is still there.
	clock.Advance(2 * PeerTimeoutTicks)
	if c := d1.Collisions(); !slices.Equal(c, []string{"door"}) {
		t.Errorf("later, with both twins alive: door/b1 collisions %v, peers %+v, events %v", c, d1.Peers(), events)
	}
}

// TestReview6OwnerRestart: an add-on that owns a namespace restarts (a new
// instance, empty state: a script reload) while a long-lived replica (the
// bridge) keeps its copy. The owner's new writes must reach the replica,
// even with periodic resync.
func TestReview6OwnerRestart(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	ob := newBus(t, clock, w, "o", "o1")
	owner := NewState(ob, StateOptions{})
	owner.Own("n")
	replica := NewState(newBus(t, clock, w, "r", "r1"), StateOptions{ResyncTicks: 20})
	replica.Follow("n")
	clock.Advance(3)
	for i := range 5 {
		owner.Set("n", "k", json.RawMessage(fmt.Sprint(i)))
	}
	clock.Advance(3)
	if e, _ := replica.Get("n", "k"); string(e.Value) != "4" {
		t.Fatalf("before the restart the replica has %+v", e)
	}
	owner.Close()
	ob.Stop()
	owner2 := NewState(newBus(t, clock, w, "o", "o2"), StateOptions{})
	owner2.Own("n")
	clock.Advance(3)
	owner2.Set("n", "k", json.RawMessage(`"after restart"`))
	clock.Advance(100)
	o, _ := owner2.Get("n", "k")
	r, _ := replica.Get("n", "k")
	if string(o.Value) != string(r.Value) {
		t.Fatalf("never converge: owner %s (ver %d), replica %s (ver %d)", o.Value, o.Version, r.Value, r.Version)
	}
}

// TestReview6FramesFitMaxMessage: docs/bedrock.md (and the seed) say the
// halved budget "guarantees each encoded frame fits" MaxMessage. A frame
// whose slice starts and ends inside surrogate pairs carries two lone
// surrogates, each written \udxxx (6 units, not 2): with quotes in
// between, the frame passes MaxMessage, and a medium that enforces the
// cap drops the message. (node's JSON.stringify of the same slices is as
// long: the flaw is the budget's, faithfully copied.)
func TestReview6FramesFitMaxMessage(t *testing.T) {
	env := &Envelope{V: 1, Src: "s", IID: "q", Type: "res", MID: "q/1", Data: json.RawMessage(`""`)}
	empty, _ := AppendEnvelope(nil, env)
	pre := len16(string(empty)) - 2 // where data's content starts
	b := Budget(env.MID)
	var data []rune
	pos := pre
	for pos%b != b-1 {
		data = append(data, 'x')
		pos++
	}
	for range 150 { // an emoji across every frame boundary, quotes between
		data = append(data, 0x1F600)
		for range (b - 2) / 2 {
			data = append(data, '"')
		}
		pos += b
	}
	env.Data, _ = json.Marshal(string(data))
	text, _ := AppendEnvelope(nil, env)
	frames, err := Split(env.MID, string(text))
	if err != nil {
		t.Fatal(err)
	}
	longest := 0
	for _, f := range frames {
		longest = max(longest, len16(EncodeFrame(f)))
	}
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{MaxLen: MaxMessage})
	a := newBus(t, clock, w, "s", "q")
	got := 0
	newBus(t, clock, w, "b", "b1").On("res", func(*Envelope) { got++ })
	a.Send(SendOptions{Type: "res", MID: "q/1", Data: env.Data})
	clock.Advance(10)
	if longest > MaxMessage || got != 1 {
		t.Fatalf("budget %d: longest frame %d code units (MaxMessage %d); %d frames refused by a medium capped at MaxMessage; delivered %d",
			b, longest, MaxMessage, a.Stats().SendFailures, got)
	}
}

const genJS = `'use strict';
const MAX_MESSAGE = 2000;
let seed = 12345;
function rnd() { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; }
function ri(n) { return Math.floor(rnd() * n); }
const pool = ['a','b','"','\\','/','\n','\r','\t','\b','\f','\u0000','\u001f','\u007f','\u0080','\u00e9','\u2028','\u2029','\ud800','\udbff','\udc00','\udfff','\u{1F600}','\u4e2d','<','>','&','\ufeff','\uffff','\u0085',' '];
const wellPool = pool.filter(c => !/^[\ud800-\udfff]$/.test(c));
function rstr(n, p) { let s=''; for (let i=0;i<n;i++) s += p[ri(p.length)]; return s; }
function rdata(depth) {
  const k = ri(depth > 2 ? 3 : 6);
  switch (k) {
    case 0: return rstr(ri(40), pool);
    case 1: return ri(1000000) - 500;
    case 2: return [null,true,false][ri(3)];
    case 3: { const a=[]; const n=ri(5); for (let i=0;i<n;i++) a.push(rdata(depth+1)); return a; }
    default: { const o={}; const n=ri(5); for (let i=0;i<n;i++) o['k'+ri(100)+rstr(ri(3), wellPool)] = rdata(depth+1); return o; }
  }
}
// messy serializer: random whitespace, random escapes, same value
function ws() { return [' ', '', '\n', '\t', '\r', ''][ri(6)]; }
function mq(s) {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s[i], u = s.charCodeAt(i);
    const r = ri(4);
    if (c === '"' ) out += r ? '\\"' : '\\u0022';
    else if (c === '\\') out += r ? '\\\\' : '\\u005C';
    else if (u < 0x20 || (u >= 0xd800 && u <= 0xdfff)) out += '\\u' + u.toString(16).padStart(4,'0')[r%2?'toUpperCase':'toLowerCase']();
    else if (c === '/' && r === 0) out += '\\/';
    else if (r === 0) out += '\\u' + u.toString(16).padStart(4,'0');
    else out += c;
  }
  return out + '"';
}
function messy(v) {
  if (typeof v === 'string') return mq(v);
  if (v === null || typeof v !== 'object') return ws() + JSON.stringify(v) + ws();
  if (Array.isArray(v)) return ws() + '[' + v.map(messy).join(',') + ']' + ws();
  return ws() + '{' + Object.keys(v).map(k => ws() + mq(k) + ws() + ':' + messy(v[k])).join(',') + '}' + ws();
}
function frames(env) {
  const encoded = JSON.stringify(env);
  const c = env.mid;
  const overhead = JSON.stringify({ c, s: 999999, t: 999999, p: '' }).length;
  const budget = Math.floor((MAX_MESSAGE - overhead) / 2);
  const t = Math.max(1, Math.ceil(encoded.length / budget));
  const out = [];
  for (let s = 0; s < t; s++) out.push(JSON.stringify({ c, s, t, p: encoded.slice(s * budget, (s + 1) * budget) }));
  return { encoded, overhead, budget, frames: out };
}
const cases = [];
for (let i = 0; i < 400; i++) {
  const iid = rstr(1 + ri(i % 50 === 0 ? 400 : 12), wellPool);
  const env = { v: 1, src: rstr(1+ri(8), wellPool), iid };
  if (ri(2)) env.dst = rstr(1+ri(8), wellPool);
  env.type = rstr(1+ri(8), wellPool);
  env.mid = iid + '/' + (1 + ri(100000));
  let data;
  if (ri(5)) { data = rdata(0); if (i % 7 === 0) data = { big: rstr(500 + ri(4000), pool), d: data }; env.data = data; }
  const f = frames(env);
  cases.push({ envJSON: JSON.stringify(env), messyData: env.data === undefined ? null : messy(env.data), ...f });
}
process.stdout.write(JSON.stringify(cases));
`

// TestReview6RefusedDeltaDoesNotPushTheClock: package state's rule is
// that "a refused write must not push" the Lamport clock. One delta from
// anyone, for a namespace nobody holds, with ver 2^53-1, must not leave
// the owner unable to write its own keys twice.
func TestReview6RefusedDeltaDoesNotPushTheClock(t *testing.T) {
	clock := NewSimClock()
	w := NewWorld(clock, WorldOptions{})
	owner := NewState(newBus(t, clock, w, "o", "o1"), StateOptions{})
	if err := owner.Own("n"); err != nil {
		t.Fatal(err)
	}
	prank := newBus(t, clock, w, "x", "x1")
	prank.Send(SendOptions{Type: TypeStateDelta, Data: json.RawMessage(`{"ns":"nobody-holds-this","key":"k","value":1,"ver":9007199254740991}`)})
	clock.Advance(3)
	if _, err := owner.Set("n", "k", json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	if e, err := owner.Set("n", "k", json.RawMessage(`2`)); err != nil {
		t.Fatalf("the owner's second write: %v (entry %+v)", err, e)
	}
}

// FuzzReview6Services: any envelope a peer may send, dispatched to a node
// running RPC, discovery and state, must not panic it.
func FuzzReview6Services(f *testing.F) {
	for _, s := range []string{
		`{"method":"x","params":[1]}`, `{"rid":"n1/1","ok":true,"data":1}`, `{"version":"1","schemaVersion":2,"meta":{}}`,
		`{"ns":"n","key":"k","value":1,"ver":3}`, `{"ns":"n","entries":[{"k":"a","v":1,"ver":2,"src":"o"}]}`, `{}`, `null`,
	} {
		for _, typ := range []string{TypeRequest, TypeResponse, TypeAnnounce, TypeStateDelta, TypeStateSnapshot, TypeStateRequest, TypeWhois} {
			f.Add(typ, "o", s)
		}
	}
	f.Fuzz(func(t *testing.T, typ, src, data string) {
		if src == "" || typ == "" || !json.Valid([]byte(data)) {
			return
		}
		clock := NewSimClock()
		w := NewWorld(clock, WorldOptions{})
		b, _ := New(Options{SelfID: "n", InstanceID: "n1", Medium: w, Clock: clock})
		b.Start()
		defer b.Stop()
		r := NewRPC(b)
		r.Handle("x", func(p json.RawMessage, _ *Envelope) (any, error) { return p, nil })
		r.Go("o", "x", nil, 0, func(Response, error) {})
		d := NewDiscovery(b, AnnounceData{}, func(PeerEvent) {})
		s := NewState(b, StateOptions{ResyncTicks: 1, OnChange: func(StateChange) {}})
		s.Own("mine")
		b.dispatch(&Envelope{V: 1, Src: src, IID: "p1", Type: typ, MID: "p1/1", Data: json.RawMessage(data)})
		b.dispatch(&Envelope{V: 1, Src: src, IID: "p1", Type: TypeStateSnapshot, MID: "p1/2", Data: json.RawMessage(`{"ns":"n","entries":[]}`)})
		b.dispatch(&Envelope{V: 1, Src: src, IID: "p1", Type: typ, MID: "p1/3", Data: json.RawMessage(data)})
		clock.Advance(3)
		d.Close()
		s.Close()
		r.Close()
	})
}
