package auth

// Namespaced (MoonBridge "namespace:path") channel names and their
// patterns: the grammar at and past each edge, and how ':' meets wildcards.

import (
	"errors"
	"strings"
	"testing"
)

func TestValidChannelNamespaced(t *testing.T) {
	// 63 + ':' + 64 = 128 bytes, MaxChannelLen exactly.
	ns, path := strings.Repeat("n", 63), strings.Repeat("p", 64)
	tests := []struct {
		name string
		ok   bool
		why  string // part of the error text when !ok
	}{
		{"myplugin:events", true, ""},
		{"minecraft:brand", true, ""},
		{"my.mod:chat.v2", true, ""}, // '.' is an ordinary byte on both sides
		{"a:b", true, ""},            // the shortest: one byte each side
		{"a_b-c.9:x_y-z.0", true, ""},
		{"a..b:.c.", true, ""}, // dots separate nothing here, so runs and ends are fine
		{"0:0", true, ""},
		{ns + ":" + path, true, ""},
		{ns + ":" + path + "p", false, "longer than MaxChannelLen"},
		{":events", false, "empty namespace"},
		{"myplugin:", false, "empty path"},
		{":", false, "empty namespace"},
		{"a:b:c", false, "second ':'"},
		{"a::b", false, "second ':'"},
		{"MyPlugin:events", false, "upper-case"},
		{"myplugin:Events", false, "upper-case"},
		{"my plugin:events", false, "invalid byte"},
		{"myplugin:ev/ents", false, "invalid byte"},
		{"myplugin:*", false, "invalid byte"},
		{"myplugin:>", false, "invalid byte"},
		{"café:x", false, "invalid byte"},
		{"bus:x", false, "reserved"},
		{"bus.node:x", false, "reserved"},
		{"busy:x", true, ""},
		{"x:bus", true, ""},
	}
	for _, tt := range tests {
		err := ValidChannel(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidChannel(%q) = %v, want ok=%v", tt.name, err, tt.ok)
			continue
		}
		if err != nil && (!errors.Is(err, ErrBadChannel) || !strings.Contains(err.Error(), tt.why)) {
			t.Errorf("ValidChannel(%q) = %v, want ErrBadChannel saying %q", tt.name, err, tt.why)
		}
	}
	for _, name := range []string{"bus:x", "bus.x:y", "a:b"} {
		if ValidControlChannel(name) == nil {
			t.Errorf("ValidControlChannel(%q) accepted a namespaced name", name)
		}
	}
}

func TestParsePatternNamespaced(t *testing.T) {
	tests := []struct {
		pat string
		ok  bool
	}{
		{"myplugin:events", true},
		{"myplugin:*", true},
		{"myplugin:>", true},
		{"*:events", true},
		{"*:*", true},
		{"my.mod:chat.v2", true},
		{"*:>", true},
		{">:events", false}, // ">" only for the path
		{":events", false},
		{"myplugin:", false},
		{"a:b:c", false},
		{"MyPlugin:*", false},
		{"my*:x", false},
		{"myplugin:ev*", false},
		{"a.>:x", false},
		{strings.Repeat("n", 63) + ":" + strings.Repeat("p", 64), true},
		{strings.Repeat("n", 63) + ":" + strings.Repeat("p", 65), false},
	}
	for _, tt := range tests {
		_, err := ParsePattern(tt.pat)
		if (err == nil) != tt.ok {
			t.Errorf("ParsePattern(%q) = %v, want ok=%v", tt.pat, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrBadPattern) {
			t.Errorf("ParsePattern(%q) error does not wrap ErrBadPattern", tt.pat)
		}
	}
}

func TestMatchNamespaced(t *testing.T) {
	tests := []struct {
		pat, ch string
		want    bool
	}{
		{"myplugin:events", "myplugin:events", true},
		{"myplugin:events", "myplugin:event", false},
		{"myplugin:events", "myplugin:events2", false},
		{"myplugin:events", "otherplugin:events", false},
		{"myplugin:*", "myplugin:events", true},
		{"myplugin:*", "myplugin:chat.v2", true}, // the path is one part, dots and all
		{"myplugin:>", "myplugin:chat.v2", true},
		{"myplugin:*", "myplugin2:events", false},
		{"*:events", "myplugin:events", true},
		{"*:events", "my.mod:events", true},
		{"*:events", "myplugin:chat", false},
		{"*:*", "a:b", true},
		{">", "myplugin:events", true}, // ">" alone: every channel, both forms
		{">", "bus:x", false},          // never a valid channel
		// The forms never cross, but for ">" alone.
		{"*", "myplugin:events", false},
		{"myplugin.>", "myplugin:events", false},
		{"my.>", "my.mod:events", false},
		{"*.*", "my.mod:events", false},
		{"myplugin:*", "myplugin.events", false},
		{"*:*", "a.b", false},
		{"*:*", "bus.x", false},
		{"my:*", "MY:x", false},
	}
	for _, tt := range tests {
		if got := Pattern(tt.pat).Match(tt.ch); got != tt.want {
			t.Errorf("Pattern(%q).Match(%q) = %v, want %v", tt.pat, tt.ch, got, tt.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Pattern("*:events").Match("myplugin:events") }); n != 0 {
		t.Errorf("namespaced Match: %v allocs, want 0", n)
	}
}

func TestPermissionsNamespaced(t *testing.T) {
	perm := &Permissions{Publish: []Pattern{"myplugin:*"}, Subscribe: []Pattern{"*:events", "orders.>"}}
	for _, tt := range []struct {
		act  Action
		ch   string
		want bool
	}{
		{ActionPublish, "myplugin:events", true},
		{ActionPublish, "other:events", false},
		{ActionPublish, "myplugin.events", false},
		{ActionSubscribe, "other:events", true},
		{ActionSubscribe, "orders.created", true},
		{ActionSubscribe, "orders:created", false},
	} {
		if got := perm.Allows(tt.act, tt.ch); got != tt.want {
			t.Errorf("Allows(%v, %q) = %v, want %v", tt.act, tt.ch, got, tt.want)
		}
	}
	all := AllPermissions()
	if !all.Allows(ActionHandle, "myplugin:events") {
		t.Error(`AllPermissions (">") does not allow a namespaced channel`)
	}
}

func TestMatchNamespaceNamespaced(t *testing.T) {
	tests := []struct {
		pat, ns string
		want    bool
	}{
		{"myplugin:*", "myplugin:config", true},
		{"myplugin:>", "myplugin:config", true},
		{"myplugin:config", "myplugin:config", true},
		{"*:config", "other:config", true},
		{"myplugin:*", "other:config", false},
		{"myplugin:*", "myplugin.config", false},
		{"myplugin:*", "myplugin:a:b", false}, // not of the form namespace:path
		{"myplugin:*", "myplugin:", false},
		{"*:x", ":x", false},
		// Dotted patterns keep their rules on any namespace.
		{">", "myplugin:config", true},
		{"*", "myplugin:config", true},
		{"my.>", "my.mod:config", true},
	}
	for _, tt := range tests {
		if got := Pattern(tt.pat).MatchNamespace(tt.ns); got != tt.want {
			t.Errorf("Pattern(%q).MatchNamespace(%q) = %v, want %v", tt.pat, tt.ns, got, tt.want)
		}
	}
}
