package bedrock

// Framing cross-checked against the JavaScript reference itself: node (when
// installed) generates random envelopes and frames them; Go must agree.
// frame_test.go checks the fixed golden cases without node.

import (
	"encoding/json"
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

// TestRandomEnvelopesFramedAsJS: random envelopes (random group ids with
// escapes and non-ASCII, data with lone surrogates, U+2028, nested values,
// "messy" JSON) are encoded, budgeted, split and reassembled as node does
// it, byte for byte up to the first surrogate pair JavaScript cuts.
func TestRandomEnvelopesFramedAsJS(t *testing.T) {
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
