package wire

// Targets and addresses: the forms parsed, the invalid ones and the length
// edge.

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTargetForms(t *testing.T) {
	l63 := strings.Repeat("a", 63)
	cases := []struct {
		in      string
		want    Target
		display string
	}{
		{"noded", Target{Kind: TargetService, Service: "noded"}, "noded"},
		{"a-1", Target{Kind: TargetService, Service: "a-1"}, "a-1"},
		{"alpha.bus", Target{Kind: TargetAddress, Addr: Address{Node: "alpha"}}, "alpha.bus"},
		{"noded.alpha", Target{Kind: TargetAddress, Addr: Address{Service: "noded", Node: "alpha"}}, "noded.alpha.bus"},
		{"noded.alpha.bus", Target{Kind: TargetAddress, Addr: Address{Service: "noded", Node: "alpha"}}, "noded.alpha.bus"},
		{"x.noded.alpha", Target{Kind: TargetAddress, Addr: Address{Sub: "x", Service: "noded", Node: "alpha"}}, "x.noded.alpha.bus"},
		{"x.noded.alpha.bus", Target{Kind: TargetAddress, Addr: Address{Sub: "x", Service: "noded", Node: "alpha"}}, "x.noded.alpha.bus"},
		{"0.1.2", Target{Kind: TargetAddress, Addr: Address{Sub: "0", Service: "1", Node: "2"}}, "0.1.2.bus"},
		{l63 + ".n", Target{Kind: TargetAddress, Addr: Address{Service: l63, Node: "n"}}, l63 + ".n.bus"},
		{"noded.alpha.bus@mesh.example.com", Target{Kind: TargetCrossMesh, Addr: Address{Service: "noded", Node: "alpha"}, Mesh: "mesh.example.com"}, "noded.alpha.bus@mesh.example.com"},
		{"alpha.bus@m.io", Target{Kind: TargetCrossMesh, Addr: Address{Node: "alpha"}, Mesh: "m.io"}, "alpha.bus@m.io"},
		{"s.n@m-1.x2.org", Target{Kind: TargetCrossMesh, Addr: Address{Service: "s", Node: "n"}, Mesh: "m-1.x2.org"}, "s.n.bus@m-1.x2.org"},
	}
	for _, c := range cases {
		got, err := ParseTarget(c.in)
		if err != nil {
			t.Errorf("ParseTarget(%q): %v", c.in, err)
			continue
		}
		if got != c.want || got.String() != c.display {
			t.Errorf("ParseTarget(%q) = %+v %q, want %+v %q", c.in, got, got.String(), c.want, c.display)
		}
		// Display form is canonical: it parses back to the same target.
		if again, err := ParseTarget(got.String()); err != nil || again != got {
			t.Errorf("re-parse of %q: %+v %v", got.String(), again, err)
		}
		if c.want.Kind == TargetAddress {
			a, err := ParseAddress(c.in)
			if err != nil || a != c.want.Addr {
				t.Errorf("ParseAddress(%q) = %+v, %v", c.in, a, err)
			}
		}
	}
}

func TestParseTargetInvalid(t *testing.T) {
	long := strings.Repeat("abcdefgh.", 28) + "bus" // 255 bytes, 29 labels
	cases := []string{
		"",
		".",
		"bus",                          // no node before .bus (as an address)
		"Noded.alpha",                  // uppercase
		"noded.ALPHA.bus",              // uppercase
		"-noded.alpha",                 // leading hyphen
		"noded-.alpha",                 // trailing hyphen
		"no_ded.alpha",                 // underscore
		"noded..alpha",                 // empty label
		".noded.alpha",                 // empty first label
		"noded.alpha.",                 // trailing dot
		"a.b.c.d",                      // four labels without .bus
		"a.b.c.d.bus",                  // four labels with .bus
		strings.Repeat("a", 64) + ".n", // label of 64
		long,                           // too long
		"noded.alpha@",                 // empty mesh
		"@mesh.example.com",            // empty local
		"noded.alpha@localhost",        // mesh not an FQDN
		"noded.alpha@Mesh.example.com", // uppercase mesh
		"noded.alpha@mesh..com",        // empty mesh label
		"noded@mesh.example.com",       // bare service as local part
		"a.b@c.d@e.f",                  // two @
		"noded alpha",                  // space
		"nöded.alpha",                  // non-ASCII
		"a.b.c@" + strings.Repeat("m.", 127) + "io", // mesh too long
	}
	for _, in := range cases {
		if got, err := ParseTarget(in); err == nil || !errors.Is(err, ErrBadAddress) {
			t.Errorf("ParseTarget(%q) = %+v, %v; want ErrBadAddress", in, got, err)
		}
	}
	// ParseAddress refuses the bare form with a pointer to the registry.
	_, err := ParseAddress("noded")
	if err == nil || !strings.Contains(err.Error(), "registry") {
		t.Errorf("ParseAddress(bare) = %v", err)
	}
}

func TestAddressLengthEdge(t *testing.T) {
	// A whole target of 253 bytes is allowed, 254 is not. Labels are capped
	// at 63, so only the cross-mesh form can get that long.
	l := func(n int) string { return strings.Repeat("a", n) }
	if _, err := ParseAddress(l(63) + "." + l(63) + "." + l(63) + ".bus"); err != nil {
		t.Fatal(err)
	}
	at := "a.bus@" + l(63) + "." + l(63) + "." + l(63) + "." + l(55) // 253
	if len(at) != MaxAddressLen {
		t.Fatalf("test target is %d bytes", len(at))
	}
	if _, err := ParseTarget(at); err != nil {
		t.Fatalf("target of 253: %v", err)
	}
	if _, err := ParseTarget(at + "a"); !errors.Is(err, ErrBadAddress) {
		t.Fatalf("target of 254: %v", err)
	}
	if _, err := ParseAddress(l(254)); !errors.Is(err, ErrBadAddress) {
		t.Fatalf("address of 254: %v", err)
	}
}
