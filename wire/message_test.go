package wire

// Message building, heartbeats, copies and Check.

import (
	"slices"
	"testing"
)

func TestMessageBuilders(t *testing.T) {
	m := Command("noded.ping").WithHeader("to", "noded").WithHeader("from", "probe").WithHeader("id", "1").WithBody([]byte(`{"detail":true}`))
	want := "---\ncommand: noded.ping\nfrom: probe\nid: 1\nto: noded\ntype: request\n---\n{\"detail\":true}"
	if got := m.ToWire(); got != want {
		t.Fatalf("ToWire:\n%q\nwant\n%q", got, want)
	}
	if got := string(m.ToBytes()); got != want {
		t.Fatalf("ToBytes = %q", got)
	}
	if m.WireLen() != len(want) {
		t.Fatalf("WireLen = %d, want %d", m.WireLen(), len(want))
	}
	if v, ok := m.Get("type"); !ok || v != TypeRequest {
		t.Fatalf("Get(type) = %q, %v", v, ok)
	}
	if _, ok := m.Get("absent"); ok {
		t.Fatal("Get(absent) found a value")
	}
	m.Set("to", "other")
	if m.Value("to") != "other" || m.Len() != 5 {
		t.Fatalf("Set did not replace: %v", m.HeaderMap())
	}
	m.Del("to")
	m.Del("to")
	if _, ok := m.Get("to"); ok || m.Len() != 4 {
		t.Fatalf("Del: %v", m.HeaderMap())
	}
	var keys []string
	for k := range m.Headers() {
		keys = append(keys, k)
	}
	if !slices.IsSorted(keys) {
		t.Fatalf("headers not sorted: %v", keys)
	}
}

func TestMessageEmptyIsHeartbeat(t *testing.T) {
	for _, m := range []*Message{Empty(), {}, New("", "")} {
		if got := m.ToWire(); got != "---\n---\n" {
			t.Fatalf("heartbeat = %q", got)
		}
		if !m.IsHeartbeat() {
			t.Fatal("IsHeartbeat = false")
		}
	}
	if Command("x").IsHeartbeat() || Empty().WithBody([]byte("b")).IsHeartbeat() {
		t.Fatal("non-empty message is a heartbeat")
	}
}

func TestMessageCopiesAndClone(t *testing.T) {
	body := []byte("payload")
	m := Empty().WithBody(body)
	body[0] = 'X'
	if string(m.Body()) != "payload" {
		t.Fatal("WithBody did not copy the caller's slice")
	}
	c := m.Clone()
	c.Set("k", "v")
	c.Body()[0] = 'Y'
	if m.Len() != 0 || string(m.Body()) != "payload" {
		t.Fatal("Clone shares storage with the original")
	}
	if !Empty().Equal(Empty().WithBody([]byte{})) {
		t.Fatal("nil and empty body differ")
	}
	if m.Equal(c) {
		t.Fatal("different messages are Equal")
	}
}

func TestMessageCheck(t *testing.T) {
	cases := []struct {
		k, v string
		want DefectKind
	}{
		{"ok", "fine value: with colon", DefectNone},
		{"ok", "", DefectNone},
		{"ok", `{"a":1}`, DefectNone},
		{"", "v", DefectEmptyKey},
		{" k", "v", DefectLeadingWhitespace},
		{"a b", "v", DefectKeyWhitespace},
		{"a\x00", "v", DefectKeyWhitespace},
		{"a\x7f", "v", DefectKeyWhitespace},
		{"k", "line\nfrom: forged", DefectNewlineInValue},
		{"k", "{broken", DefectBadJSON},
		{"k", "[1,", DefectBadJSON},
	}
	for _, c := range cases {
		err := Empty().WithHeader(c.k, c.v).Check()
		if c.want == DefectNone {
			if err != nil {
				t.Errorf("Check(%q: %q) = %v", c.k, c.v, err)
			}
			continue
		}
		pe, ok := err.(*ParseError)
		if !ok || pe.Kind != c.want {
			t.Errorf("Check(%q: %q) = %v, want %v", c.k, c.v, err, c.want)
		}
	}
}
