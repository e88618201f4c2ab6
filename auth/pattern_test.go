package auth

// Channel patterns: parsing, matching (with no allocation) and its cost.

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePattern(t *testing.T) {
	tests := []struct {
		pat string
		ok  bool
	}{
		{"orders.created", true},
		{"*", true},
		{">", true},
		{"a.>", true},
		{"a.*.c", true},
		{"*.*", true},
		{"bus.>", true},
		{"", false},
		{">.a", false},
		{"a.>.c", false},
		{"a.", false},
		{".a", false},
		{"a..b", false},
		{"a*", false},
		{"a.b*", false},
		{"a.>>", false},
		{"a b", false},
		{strings.Repeat("a", MaxChannelLen+1), false},
	}
	for _, tt := range tests {
		p, err := ParsePattern(tt.pat)
		if (err == nil) != tt.ok {
			t.Errorf("ParsePattern(%q) = %v, want ok=%v", tt.pat, err, tt.ok)
			continue
		}
		if err != nil && !errors.Is(err, ErrBadPattern) {
			t.Errorf("ParsePattern(%q) error does not wrap ErrBadPattern", tt.pat)
		}
		if err == nil && string(p) != tt.pat {
			t.Errorf("ParsePattern(%q) = %q", tt.pat, p)
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pat, ch string
		want    bool
	}{
		{"orders.created", "orders.created", true},
		{"orders.created", "orders.deleted", false},
		{"orders.created", "orders", false},
		{"orders", "orders.created", false},
		{"*", "orders", true},
		{"*", "orders.created", false},
		{">", "orders", true},
		{">", "orders.created.eu", true},
		{">", "bus.x", false},
		{"*.x", "bus.x", false},
		{"*", "bus", false},
		{"bus.>", "bus.x", true},
		{"bus.*", "bus.node.joined", false},
		{"a.>", "a.b", true},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{"a.>", "b.c", false},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.bb.c", true},
		{"a.*.c", "a.b.d", false},
		{"a.*.c", "a.c", false},
		{"a.*.c", "a.b.c.d", false},
		{"*.*", "a.b", true},
		{"*.>", "a", false},
		{"*.>", "a.b.c", true},
		{"A.b", "a.b", false}, // case-sensitive
		{"", "a", false},
		{"a", "", false},
		{">", "", false},
		{"a.*", "a..b", false},
		{"a.>.c", "a.b.c", false}, // malformed: ">" not last
		{">.c", "a.c", false},
		{"a.", "a.b", false},
		{"*", "a*", false},
		{">", strings.Repeat("a", MaxChannelLen+1), false},
	}
	for _, tt := range tests {
		if got := Pattern(tt.pat).Match(tt.ch); got != tt.want {
			t.Errorf("Pattern(%q).Match(%q) = %v, want %v", tt.pat, tt.ch, got, tt.want)
		}
	}
}

func TestMatchNoAlloc(t *testing.T) {
	cases := []struct{ p, ch string }{
		{"a.*.c.>", "a.b.c.d.e"},
		{">", "orders.created"},
		{"a.b", "x.y"},
		{">", "bus.x"},
	}
	for _, c := range cases {
		if n := testing.AllocsPerRun(100, func() { Pattern(c.p).Match(c.ch) }); n != 0 {
			t.Errorf("Pattern(%q).Match(%q): %v allocs, want 0", c.p, c.ch, n)
		}
	}
	perm := AllPermissions()
	if n := testing.AllocsPerRun(100, func() { perm.Allows(ActionPublish, "orders.created") }); n != 0 {
		t.Errorf("Permissions.Allows: %v allocs, want 0", n)
	}
}

func BenchmarkMatch(b *testing.B) {
	p := Pattern("orders.*.eu.>")
	ch := "orders.created.eu.de.berlin"
	b.ReportAllocs()
	for b.Loop() {
		if !p.Match(ch) {
			b.Fatal("no match")
		}
	}
}

func TestMatchNamespace(t *testing.T) {
	tests := []struct {
		pat, ns string
		want    bool
	}{
		{"cfg.app", "cfg.app", true},
		{"cfg.app", "cfg.apps", false}, // one byte past the literal
		{"cfg.app", "cfg.app.x", false},
		{"cfg.app", "cfg", false},
		{"cfg.*", "cfg.app", true},
		{"cfg.*", "cfg", false},
		{"cfg.*", "cfg.app.x", false},
		{"cfg.*", "cfgx.app", false},
		{"cfg.*", "cfg.", false}, // "*" needs a non-empty token
		{"cfg.>", "cfg.a.b", true},
		{"cfg.>", "cfg", false},
		{"cfg.>", "cfg.", false},
		{"cfg.>", "cfg..x", true}, // ">" takes the non-empty rest
		{"*", "home", true},
		{"*", "home/lights", true}, // any bytes a namespace may hold
		{"*", "zürich", true},
		{"home/lights", "home/lights", false}, // not a pattern a file can hold; never a literal
		{"*", "a.b", false},
		{">", "home", true},
		{">", ".x", true},
		{"*.x", ".x", false},
		{">", "bus.x", true}, // no reserved token for namespaces
		{"*", "bus", true},
		{"Cfg.app", "cfg.app", false}, // case-sensitive
		{"", "a", false},
		{"a", "", false},
		{">", "", false},
		{"a..b", "a..b", false}, // malformed pattern
		{"a.>.c", "a.b.c", false},
	}
	for _, tt := range tests {
		if got := Pattern(tt.pat).MatchNamespace(tt.ns); got != tt.want {
			t.Errorf("Pattern(%q).MatchNamespace(%q) = %v, want %v", tt.pat, tt.ns, got, tt.want)
		}
	}
	perm := AllPermissions()
	if n := testing.AllocsPerRun(100, func() { perm.AllowsNamespace(ActionStateRead, "cfg.app") }); n != 0 {
		t.Errorf("Permissions.AllowsNamespace: %v allocs, want 0", n)
	}
}
