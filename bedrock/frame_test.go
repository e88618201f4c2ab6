package bedrock

import (
	"compress/gzip"
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
)

// golden is a case of testdata/golden.json.gz, written by the JavaScript
// reference (testdata/golden.js) with node.
type golden struct {
	Name string `json:"name"`
	Env  struct {
		V    int             `json:"v"`
		Src  string          `json:"src"`
		IID  string          `json:"iid"`
		Dst  string          `json:"dst"`
		Type string          `json:"type"`
		MID  string          `json:"mid"`
		Data json.RawMessage `json:"data"`
	} `json:"env"`
	Encoded  string   `json:"encoded"`
	Overhead int      `json:"overhead"`
	Budget   int      `json:"budget"`
	Frames   []string `json:"frames"`
}

func loadGolden(t testing.TB) []golden {
	f, err := os.Open("testdata/golden.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var cases []golden
	if err := json.NewDecoder(z).Decode(&cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 20 {
		t.Fatalf("only %d golden cases", len(cases))
	}
	return cases
}

// TestGoldenFrames: Go frames every golden envelope byte for byte as the
// JavaScript bus does, and reassembles the JavaScript frames, in any
// order, into the same envelope.
func TestGoldenFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, g := range loadGolden(t) {
		t.Run(g.Name, func(t *testing.T) {
			env := &Envelope{V: g.Env.V, Src: g.Env.Src, IID: g.Env.IID, Dst: g.Env.Dst, Type: g.Env.Type, MID: g.Env.MID, Data: g.Env.Data}
			enc, err := AppendEnvelope(nil, env)
			if err != nil {
				t.Fatal(err)
			}
			if string(enc) != g.Encoded {
				t.Fatalf("encoded:\n%q\nJavaScript:\n%q", enc, g.Encoded)
			}
			if o, b := Overhead(g.Env.MID), Budget(g.Env.MID); o != g.Overhead || b != g.Budget {
				t.Fatalf("overhead %d budget %d, JavaScript %d %d", o, b, g.Overhead, g.Budget)
			}
			frames, err := Split(g.Env.MID, string(enc))
			if err != nil {
				t.Fatal(err)
			}
			// Go writes JavaScript's frames byte for byte, except that it
			// never cuts a surrogate pair (JavaScript does, and its frame
			// then exceeds MaxMessage): from the first such cut on, the
			// boundaries differ.
			jsCut := false
			for i, f := range frames {
				got := EncodeFrame(f)
				if n := len16(got); n > MaxMessage {
					t.Fatalf("frame %d is %d code units", i, n)
				}
				if !jsCut && i < len(g.Frames) && got != g.Frames[i] {
					jf, _ := DecodeFrame(g.Frames[i])
					if len(jf.P) == 0 || !utf16.IsSurrogate(rune(jf.P[len(jf.P)-1])) {
						t.Fatalf("frame %d:\n%q\nJavaScript:\n%q", i, got, g.Frames[i])
					}
					jsCut = true
				}
			}
			if !jsCut && len(frames) != len(g.Frames) {
				t.Fatalf("%d frames, JavaScript %d", len(frames), len(g.Frames))
			}
			// Reassemble the JavaScript frames in a shuffled order.
			r := NewReassembler()
			order := rng.Perm(len(g.Frames))
			var whole []uint16
			for k, i := range order {
				f, err := DecodeFrame(g.Frames[i])
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				w, done := r.Add(f, int64(k))
				if done != (k == len(order)-1) {
					t.Fatalf("complete after %d of %d frames", k+1, len(order))
				}
				whole = w
			}
			if !slices.Equal(whole, units(g.Encoded)) {
				t.Fatal("reassembled text differs")
			}
			back, err := DecodeEnvelope(whole)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := AppendEnvelope(nil, back)
			if string(again) != g.Encoded || r.Pending() != 0 {
				t.Fatalf("round trip:\n%q\n%q", again, g.Encoded)
			}
		})
	}
}

func TestQuoteLikeJSONStringify(t *testing.T) {
	cases := []struct {
		in   []uint16
		want string
	}{
		{units(`plain`), `"plain"`},
		{units("\"\\/\b\f\n\r\t"), `"\"\\/\b\f\n\r\t"`},
		{units("\x00\x01\x1f\x7f"), `"\u0000\u0001\u001f` + "\x7f" + `"`},
		{units("<>&\u2028\u2029é中"), "\"<>&\u2028\u2029é中\""},
		{units("😀"), "\"😀\""},
		{[]uint16{0xd83d}, `"\ud83d"`},                           // a lone high surrogate
		{[]uint16{0xde00, 0xd83d}, `"\ude00\ud83d"`},             // low then high: two lone ones
		{[]uint16{'a', 0xd83d, 0xde00, 0xd83d}, "\"a😀\\ud83d\""}, // a pair, then a lone one
	}
	for _, c := range cases {
		if got := string(appendQuoted(nil, c.in)); got != c.want {
			t.Errorf("%x: %s, want %s", c.in, got, c.want)
		}
		back, n, err := unquote16([]byte(c.want))
		if err != nil || n != len(c.want) || !slices.Equal(back, c.in) {
			t.Errorf("unquote %s: %x %d %v", c.want, back, n, err)
		}
	}
	for _, bad := range []string{``, `"`, `"abc`, `"\x"`, `"\u12"`, `"\u12g4"`, "\"\x01\"", "\"\xff\"", `abc`} {
		if _, _, err := unquote16([]byte(bad)); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// TestSplitAtBudgetEdges cuts envelopes of exactly one budget, one more
// and one less, with a surrogate pair on the boundary.
func TestSplitAtBudgetEdges(t *testing.T) {
	const mid = "inst/1"
	budget := Budget(mid)
	if budget != (MaxMessage-len16(`{"c":"inst/1","s":999999,"t":999999,"p":""}`))/2 {
		t.Fatalf("budget %d", budget)
	}
	for _, n := range []int{budget - 1, budget, budget + 1, 2 * budget, 2*budget + 1} {
		text := strings.Repeat("a", n)
		frames, err := Split(mid, text)
		if err != nil {
			t.Fatal(err)
		}
		if want := (n + budget - 1) / budget; len(frames) != want {
			t.Fatalf("%d units: %d frames, want %d", n, len(frames), want)
		}
	}
	// A pair across the boundary stays whole: the first frame ends one
	// unit early.
	text := strings.Repeat("a", budget-1) + "😀" + "b"
	frames, _ := Split(mid, text)
	if len(frames) != 2 || len(frames[0].P) != budget-1 || frames[1].P[0] != 0xd83d {
		t.Fatalf("frames %d", len(frames))
	}
	// A JavaScript sender's cut pair is reassembled all the same.
	u := units(text)
	js := []Frame{{C: mid, S: 0, T: 2, P: u[:budget]}, {C: mid, S: 1, T: 2, P: u[budget:]}}
	if enc := EncodeFrame(js[0]); !strings.HasSuffix(enc, `\ud83d"}`) {
		t.Fatalf("first frame ends %q", enc[len(enc)-12:])
	}
	r := NewReassembler()
	r.Add(js[1], 0)
	whole, done := r.Add(js[0], 0)
	if !done || stringOf(whole) != text {
		t.Fatal("pair not rejoined")
	}
	if _, err := Split(strings.Repeat("m", MaxMessage), "x"); err != ErrGroupID {
		t.Fatalf("huge group id: %v", err)
	}
	if frames, _ := Split(mid, ""); len(frames) != 1 || len(frames[0].P) != 0 {
		t.Fatal("an empty envelope is one empty frame")
	}
}

func TestDecodeFrameStrict(t *testing.T) {
	good := `{"c":"g","s":0,"t":2,"p":"x"}`
	if f, err := DecodeFrame(good); err != nil || f.C != "g" || f.S != 0 || f.T != 2 || stringOf(f.P) != "x" {
		t.Fatalf("%+v %v", f, err)
	}
	if f, err := DecodeFrame(`{"c":"g","s":1.0,"t":2e0,"p":"","extra":1}`); err != nil || f.S != 1 || f.T != 2 {
		t.Fatalf("integral numbers: %+v %v", f, err)
	}
	for _, bad := range []string{
		``, `null`, `[]`, `"s"`, `{`, `{"c":"g","s":0,"t":2}`, `{"c":1,"s":0,"t":2,"p":""}`,
		`{"c":"g","s":"0","t":2,"p":""}`, `{"c":"g","s":0.5,"t":2,"p":""}`, `{"c":"g","s":0,"t":2,"p":1}`,
		`{"C":"g","s":0,"t":2,"p":""}`, `{"c":"g","s":0,"t":1e300,"p":""}`, `{"c":"g","s":0,"t":2,"p":"\x"}`,
	} {
		if _, err := DecodeFrame(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

func TestReassemblerRules(t *testing.T) {
	r := NewReassembler()
	f := func(c string, s, t int, p string) Frame { return Frame{C: c, S: s, T: t, P: units(p)} }
	if w, ok := r.Add(f("one", 0, 1, "whole"), 0); !ok || stringOf(w) != "whole" || r.Pending() != 0 {
		t.Fatal("a single frame is not buffered")
	}
	steps := []struct {
		f    Frame
		now  int64
		done string
	}{
		{f("g", 0, 3, "a"), 0, ""},
		{f("g", 0, 3, "A"), 1, ""},   // duplicate: ignored
		{f("g", 1, 2, "b"), 2, ""},   // t disagrees: ignored
		{f("g", 3, 3, "x"), 3, ""},   // out of range
		{f("g", -1, 3, "x"), 3, ""},  // out of range
		{f("g", 1, 0, "x"), 3, ""},   // t below one
		{f("g", 2, 3, "c"), 198, ""}, // renews the expiry to 398
		{f("g", 1, 3, "b"), 397, "abc"},
	}
	for i, s := range steps {
		w, ok := r.Add(s.f, s.now)
		if ok != (s.done != "") || ok && stringOf(w) != s.done {
			t.Fatalf("step %d: %v %q", i, ok, stringOf(w))
		}
	}
	if r.Ignored() != 5 {
		t.Fatalf("ignored %d", r.Ignored())
	}
	// Expiry: 200 ticks after the last accepted frame, at a sweep.
	r.Add(f("h", 0, 2, "x"), 100)
	r.Sweep(299)
	if r.Pending() != 1 {
		t.Fatal("expired early")
	}
	r.Sweep(300)
	if r.Pending() != 0 || r.Expired() != 1 {
		t.Fatal("not expired at 200 ticks")
	}
	// The late half of an expired group starts a new group, which expires too.
	if _, ok := r.Add(f("h", 1, 2, "y"), 301); ok {
		t.Fatal("completed from an expired group")
	}
	// Limits the seed leaves open.
	if _, ok := r.Add(f("big", 0, MaxGroupFrames+1, "x"), 0); ok || r.Pending() != 1 {
		t.Fatal("a group over MaxGroupFrames was buffered")
	}
	r2 := NewReassembler()
	for i := range MaxPendingGroups {
		r2.Add(f(string(rune('a'+i%26))+strings.Repeat("x", i/26), 0, 2, "p"), 0)
	}
	if r2.Pending() != MaxPendingGroups {
		t.Fatalf("pending %d", r2.Pending())
	}
	if r2.Add(f("one-more", 0, 2, "p"), 0); r2.Pending() != MaxPendingGroups {
		t.Fatal("past MaxPendingGroups")
	}
}

func TestDecodeEnvelopeStrict(t *testing.T) {
	ok := `{"v":1,"src":"a","iid":"i","type":"t","mid":"i/1"}`
	if e, err := DecodeEnvelope(units(ok)); err != nil || e.Src != "a" || e.Dst != "" || e.Data != nil {
		t.Fatalf("%+v %v", e, err)
	}
	if e, err := DecodeEnvelope(units(`{"v":1.0,"src":"a","iid":"i","dst":"b","type":"t","mid":"m","data":null,"x":1}`)); err != nil || e.Dst != "b" || string(e.Data) != "null" {
		t.Fatalf("%+v %v", e, err)
	}
	for _, bad := range []string{
		`{"v":2,"src":"a","iid":"i","type":"t","mid":"m"}`,
		`{"v":"1","src":"a","iid":"i","type":"t","mid":"m"}`,
		`{"src":"a","iid":"i","type":"t","mid":"m"}`,
		`{"v":1,"iid":"i","type":"t","mid":"m"}`,
		`{"v":1,"src":"","iid":"i","type":"t","mid":"m"}`,
		`{"v":1,"src":"a","iid":5,"type":"t","mid":"m"}`,
		`{"v":1,"src":"a","iid":"i","type":"t"}`,
		`{"v":1,"src":"a","iid":"i","type":"t","mid":"m","dst":7}`,
		`{"v":1,"src":"a","iid":"i","type":"t","mid":"m","dst":null}`,
		`{"v":1,"src":"a","iid":"i","type":"t","mid":"m"`,
		`[1]`, `null`, ``,
	} {
		if _, err := DecodeEnvelope(units(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}

func TestReassemblerUnitCap(t *testing.T) {
	r := NewReassembler()
	big := make([]uint16, MaxPendingUnits/2)
	r.Add(Frame{C: "a", S: 0, T: 2, P: big}, 0)
	r.Add(Frame{C: "b", S: 0, T: 2, P: big}, 0) // exactly at the cap
	if r.Pending() != 2 {
		t.Fatalf("pending %d at the cap", r.Pending())
	}
	if _, ok := r.Add(Frame{C: "c", S: 0, T: 2, P: []uint16{1}}, 0); ok || r.Pending() != 2 || r.Ignored() != 1 {
		t.Fatalf("one unit past the cap: pending %d ignored %d", r.Pending(), r.Ignored())
	}
	if w, ok := r.Add(Frame{C: "a", S: 1, T: 2}, 0); !ok || len(w) != len(big) {
		t.Fatal("completing a group at the cap")
	}
	if _, ok := r.Add(Frame{C: "c", S: 0, T: 2, P: []uint16{1}}, 0); ok || r.Pending() != 2 {
		t.Fatal("room freed by a completed group was not reused")
	}
	r.Sweep(ChunkTTLTicks)
	if r.Pending() != 0 || r.units != 0 {
		t.Fatalf("after expiry: %d groups, %d units", r.Pending(), r.units)
	}
}

func TestReassemblerGroupFramesEdge(t *testing.T) {
	r := NewReassembler()
	if r.Add(Frame{C: "at", S: 0, T: MaxGroupFrames, P: units("x")}, 0); r.Pending() != 1 {
		t.Fatal("a group of MaxGroupFrames frames was not buffered")
	}
	if r.Add(Frame{C: "past", S: 0, T: MaxGroupFrames + 1, P: units("x")}, 0); r.Pending() != 1 || r.Ignored() != 1 {
		t.Fatal("a group of MaxGroupFrames+1 frames was buffered")
	}
}

// TestFramesFitMaxMessage: every encoded frame fits MaxMessage, as
// docs/bedrock.md says the halved budget guarantees, even when a frame's
// slice starts and ends inside surrogate pairs (two lone surrogates, each
// written \udxxx: 6 units, not 2) with quotes in between; a medium capped
// at MaxMessage delivers the message.
// (The budget, copied from the seed, let such frames pass MaxMessage, and
// a capped medium dropped the message.)
func TestFramesFitMaxMessage(t *testing.T) {
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
