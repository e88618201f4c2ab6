package bedrock

import (
	"encoding/json"
	"slices"
	"testing"
	"unicode/utf16"
)

// FuzzDecodeFrame: any wire message either fails to decode or decodes to
// a frame that encodes and decodes back to itself.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(`{"c":"g","s":0,"t":2,"p":"x\ud83d"}`)
	f.Add(`{"c":"g","s":1.0,"t":2e0,"p":"","q":[1,{"a":null}]}`)
	f.Add(`{"c":"\u00e9","s":-1,"t":0,"p":"\\\"\n"}`)
	f.Fuzz(func(t *testing.T, msg string) {
		fr, err := DecodeFrame(msg)
		if err != nil {
			return
		}
		again, err := DecodeFrame(EncodeFrame(fr))
		if err != nil || again.S != fr.S || again.T != fr.T || !slices.Equal(again.P, fr.P) {
			t.Fatalf("%q: %+v vs %+v (%v)", msg, fr, again, err)
		}
		r := NewReassembler()
		r.Add(fr, 0)
		r.Sweep(ChunkTTLTicks)
	})
}

// FuzzDecodeEnvelope: any text either fails or decodes to an envelope
// that encodes and decodes to the same envelope.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(`{"v":1,"src":"a","iid":"i","type":"t","mid":"m"}`)
	f.Add(`{"v":1,"src":"a","iid":"i","dst":"b","type":"t","mid":"m","data":{"k":["\ud800",1e3,"<&>"]}}`)
	f.Add(`{"v":2,"src":"a"}`)
	f.Fuzz(func(t *testing.T, text string) {
		e, err := DecodeEnvelope(units(text))
		if err != nil {
			return
		}
		enc, err := AppendEnvelope(nil, e)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		back, err := DecodeEnvelope(units(string(enc)))
		if err != nil || back.Src != e.Src || back.IID != e.IID || back.Dst != e.Dst || back.Type != e.Type || back.MID != e.MID {
			t.Fatalf("%q: %+v vs %+v (%v)", text, e, back, err)
		}
		enc2, _ := AppendEnvelope(nil, back)
		if string(enc2) != string(enc) {
			t.Fatalf("not stable: %q vs %q", enc, enc2)
		}
	})
}

// FuzzQuoteRoundTrip: any code units, lone surrogates included, survive
// JSON.stringify-style quoting, and chunking at any budget.
func FuzzQuoteRoundTrip(f *testing.F) {
	f.Add([]byte{0x3d, 0xd8, 0x00, 0xde, 0x22, 0x00})
	f.Fuzz(func(t *testing.T, raw []byte) {
		u := make([]uint16, len(raw)/2)
		for i := range u {
			u[i] = uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
		}
		q := appendQuoted(nil, u)
		back, n, err := unquote16(q)
		if err != nil || n != len(q) || !slices.Equal(back, u) {
			t.Fatalf("%x → %s → %x (%v)", u, q, back, err)
		}
		// The quoted text is valid UTF-8: it can travel as a Go string.
		if string(utf16.Decode(units(string(q)))) != string(q) {
			t.Fatalf("%s is not valid UTF-8", q)
		}
	})
}

// FuzzServices: any envelope a peer may send, dispatched to a node
// running RPC, discovery and state, must not panic it.
func FuzzServices(f *testing.F) {
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
