package wire

// Return codes: their bands, application errors apart from transport
// failures, and Validate.

import (
	"slices"
	"testing"
)

func TestRCBands(t *testing.T) {
	if RCSuccess != 0 || RCWarning != 5 || RCError != 10 || RCFailure != 20 {
		t.Fatal("return codes differ from docs/protocol.md#return-codes")
	}
	for rc, isErr := range map[RC]bool{0: false, 5: false, 9: false, 10: true, 20: true, 255: true} {
		if rc.IsError() != isErr {
			t.Errorf("RC(%d).IsError() = %v", rc, rc.IsError())
		}
	}
	for _, s := range []string{"", "-1", "256", "1.0", "x", " 1"} {
		if _, err := ParseRC(s); err == nil {
			t.Errorf("ParseRC(%q) succeeded", s)
		}
	}
	if rc, err := ParseRC("255"); err != nil || rc != 255 {
		t.Errorf("ParseRC(255) = %d, %v", rc, err)
	}
}

func response(rc string) *Message {
	m := New(TypeResponse, "c")
	if rc != "" {
		m.Set(HeaderRC, rc)
	}
	return m
}

func TestResponseRC(t *testing.T) {
	cases := []struct {
		name string
		m    *Message
		rc   RC
	}{
		{"no rc is success", response(""), RCSuccess},
		{"rc 0", response("0"), RCSuccess},
		{"warning is success", response("5"), RCWarning},
		{"rc 9", response("9"), 9},
		{"rc 10", response("10").WithHeader(HeaderError, "no such key"), RCError},
		{"rc 255", response("255"), 255},
		{"past a u8", response("256"), RCFailure},
		{"malformed rc", response("abc"), RCFailure},
		{"no response", nil, RCFailure},
	}
	for _, c := range cases {
		if rc := ResponseRC(c.m); rc != c.rc {
			t.Errorf("%s: ResponseRC = %d, want %d", c.name, rc, c.rc)
		}
	}
}

func TestValidate(t *testing.T) {
	clean := Command("noded.ping").WithHeader("bus", "1").WithHeader("id", "1").WithHeader("from", "a").
		WithHeader("to", "b").WithHeader("args", `{"a":1}`).WithHeader("json", "[]").WithHeader("reply-to", "0").
		WithHeader("ttl", "4294967295").WithHeader("error", "x").WithHeader("result", "ACCEPTED").WithHeader("timestamp", "2026-11-29T00:00:00Z").WithHeader("rc", "255")
	if w := Validate(clean); len(w) != 0 {
		t.Fatalf("clean message warned: %v", w)
	}
	for _, typ := range ValidTypes() {
		if w := Validate(New(typ, "c")); len(w) != 0 {
			t.Fatalf("type %q warned: %v", typ, w)
		}
	}
	cases := []struct {
		k, v string
	}{
		{"x-custom", "1"},
		{"Type", "event"},
		{"type", "notify"},
		{"type", ""},
		{"args", "not json"},
		{"args", ""},
		{"json", "{"},
		{"rc", "256"},
		{"rc", "-1"},
		{"rc", "ten"},
		{"ttl", "4294967296"},
		{"ttl", "1h"},
	}
	for _, c := range cases {
		w := Validate(Empty().WithHeader(c.k, c.v))
		if len(w) != 1 || w[0].Header != c.k {
			t.Errorf("Validate(%s: %q) = %v, want one warning", c.k, c.v, w)
		}
	}
	if !slices.IsSorted(CoreHeaders()) || len(CoreHeaders()) != 13 || !IsCoreHeader("reply-to") || IsCoreHeader("x") {
		t.Fatal("CoreHeaders must be the 13 core headers, sorted")
	}
}
