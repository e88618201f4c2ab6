package auth

// Channel name syntax: which names are valid for messages and which are
// reserved control channels.

import (
	"errors"
	"strings"
	"testing"
)

func TestValidChannel(t *testing.T) {
	long := strings.Repeat("a", MaxChannelLen)
	tests := []struct {
		name string
		ok   bool
	}{
		{"orders", true},
		{"orders.created", true},
		{"A-b_c.9.x-Y", true},
		{long, true},
		{long + "b", false},
		{strings.Repeat("a.", 63) + "ab", true}, // 128 bytes
		{"", false},
		{".", false},
		{".a", false},
		{"a.", false},
		{"a..b", false},
		{"a b", false},
		{"a*", false},
		{"a.>", false},
		{"café", false},
		{"bus", false},
		{"bus.x", false},
		{"bus.node.joined", false},
		{"busy.x", true},
		{"x.bus", true},
		{"BUS.x", true}, // reservation is case-sensitive, like tokens
	}
	for _, tt := range tests {
		err := ValidChannel(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidChannel(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrBadChannel) {
			t.Errorf("ValidChannel(%q) error %v does not wrap ErrBadChannel", tt.name, err)
		}
	}
}

func TestValidControlChannel(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"bus.x", true},
		{"bus.node.joined", true},
		{"bus", false},
		{"bus.", false},
		{"bus..x", false},
		{"orders.created", false},
		{"busy.x", false},
		{"bus." + strings.Repeat("a", MaxChannelLen-4), true},
		{"bus." + strings.Repeat("a", MaxChannelLen-3), false},
	}
	for _, tt := range tests {
		err := ValidControlChannel(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidControlChannel(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrBadChannel) {
			t.Errorf("ValidControlChannel(%q) error does not wrap ErrBadChannel", tt.name)
		}
	}
}
