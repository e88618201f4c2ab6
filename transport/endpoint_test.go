package transport

// Endpoint syntax: valid and invalid endpoints, and a fuzz target.

import (
	"errors"
	"strings"
	"testing"
)

func TestParseEndpointValid(t *testing.T) {
	path107 := "/" + strings.Repeat("a", MaxUnixPathLen-1)
	tests := []struct {
		in   string
		want Endpoint
	}{
		{"unix:///run/busbar/broker.sock", Endpoint{SchemeUnix, "/run/busbar/broker.sock"}},
		{"/run/busbar/broker.sock", Endpoint{SchemeUnix, "/run/busbar/broker.sock"}},
		{"UNIX:///x", Endpoint{SchemeUnix, "/x"}},
		{"unix://" + path107, Endpoint{SchemeUnix, path107}},
		{path107, Endpoint{SchemeUnix, path107}},
		{"unix:///run/a@b%20c.sock", Endpoint{SchemeUnix, "/run/a@b%20c.sock"}}, // literal, no decoding
		{"/run/odd://name", Endpoint{SchemeUnix, "/run/odd://name"}},
		{"tcp://localhost:4222", Endpoint{SchemeTCP, "localhost:4222"}},
		{"tcp://127.0.0.1:4222", Endpoint{SchemeTCP, "127.0.0.1:4222"}},
		{"tcp://[::1]:4222", Endpoint{SchemeTCP, "[::1]:4222"}},
		{"tcp://[fe80::1%eth0]:4222", Endpoint{SchemeTCP, "[fe80::1%eth0]:4222"}},
		{"tcp://:4222", Endpoint{SchemeTCP, ":4222"}},
		{"tcp://broker.example:0", Endpoint{SchemeTCP, "broker.example:0"}},
		{"tcp://broker.example:65535", Endpoint{SchemeTCP, "broker.example:65535"}},
		{"tcp://broker.example:04222", Endpoint{SchemeTCP, "broker.example:4222"}},
		{"TCP://Broker.Example:4222", Endpoint{SchemeTCP, "Broker.Example:4222"}},
		{"localhost:4222", Endpoint{SchemeTCP, "localhost:4222"}},
		{"[::1]:4222", Endpoint{SchemeTCP, "[::1]:4222"}},
		{":4222", Endpoint{SchemeTCP, ":4222"}},
		{"tls://broker.example:4222", Endpoint{SchemeTLS, "broker.example:4222"}},
		{"tls://127.0.0.1:0", Endpoint{SchemeTLS, "127.0.0.1:0"}},
		{"tls://[::1]:4222", Endpoint{SchemeTLS, "[::1]:4222"}},
		{"ws://127.0.0.1:7475", Endpoint{SchemeWS, "127.0.0.1:7475"}},
		{"ws://127.0.0.1:7475/bus", Endpoint{SchemeWS, "127.0.0.1:7475"}}, // the path is the broker's
		{"WS://localhost:7475", Endpoint{SchemeWS, "localhost:7475"}},
		{"ws://:7475", Endpoint{SchemeWS, ":7475"}},
		{"wss://broker.example:443/bus", Endpoint{SchemeWSS, "broker.example:443"}},
		{"wss://[::1]:8443", Endpoint{SchemeWSS, "[::1]:8443"}},
	}
	for _, tt := range tests {
		got, err := ParseEndpoint(tt.in)
		if err != nil {
			t.Errorf("ParseEndpoint(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseEndpoint(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
		// Round trip: the canonical form parses back to the same endpoint
		// and is a fixed point.
		again, err := ParseEndpoint(got.String())
		if err != nil || again != got || again.String() != got.String() {
			t.Errorf("round trip of %q via %q = %#v, %v", tt.in, got.String(), again, err)
		}
	}
}

func TestParseEndpointInvalid(t *testing.T) {
	path108 := "/" + strings.Repeat("a", MaxUnixPathLen)
	tests := []struct{ in, why string }{
		{"", "empty"},
		{"http://host:80", "unknown scheme"},
		{"://host:80", "missing scheme"},
		{"unix://", "empty socket path"},
		{"unix://run/x.sock", "absolute"},
		{"unix://host/run/x.sock", "absolute"},
		{"unix://" + path108, "over the limit"},
		{path108, "over the limit"},
		{"unix:///run/x.sock?mode=0600", "query"},
		{"unix:///run/x.sock#frag", "fragment"},
		{"/run/x\x00.sock", "NUL"},
		{"unix:/run/x.sock", `missing "//"`},
		{"tls:host:4222", `missing "//"`},
		{"run/x.sock", "absolute"},
		{"./x.sock", "absolute"},
		{"localhost", "missing port"},
		{"tcp://", "missing host:port"},
		{"tcp://localhost", "missing port"},
		{"tcp://localhost:", "missing port"},
		{"tcp://localhost:http", "not a number"},
		{"tcp://localhost:+1", "not a number"},
		{"tcp://localhost:-1", "not a number"},
		{"tcp://localhost:65536", "out of range"},
		{"tcp://localhost:99999999999999999999", "out of range"},
		{"tcp://localhost:4222?x=1", "query"},
		{"tcp://localhost:4222#x", "fragment"},
		{"tcp://user:pw@localhost:4222", "userinfo"},
		{"tcp://localhost:4222/", "path"},
		{"tcp://::1:4222", "not host:port"},
		{"tcp://local host:4222", "invalid character"},
		{"tls://:4222", "host name"},
		{"tls://localhost", "missing port"},
		{"ws://localhost:7475/", "path"},
		{"ws://localhost:7475/other", "path"},
		{"ws://localhost:7475/bus/bus", "path"},
		{"ws://localhost:7475/bus?token=x", "query"},
		{"ws://localhost", "missing port"},
		{"ws:localhost:7475", `missing "//"`},
		{"wss://:7475", "host name"},
		{"http://localhost:7475/bus", "unknown scheme"},
	}
	for _, tt := range tests {
		got, err := ParseEndpoint(tt.in)
		if err == nil {
			t.Errorf("ParseEndpoint(%q) = %#v, want error", tt.in, got)
			continue
		}
		if !errors.Is(err, ErrBadEndpoint) {
			t.Errorf("ParseEndpoint(%q) error %v does not wrap ErrBadEndpoint", tt.in, err)
		}
		if !strings.Contains(err.Error(), tt.why) {
			t.Errorf("ParseEndpoint(%q) error %q does not say %q", tt.in, err, tt.why)
		}
		if got != (Endpoint{}) {
			t.Errorf("ParseEndpoint(%q) returned %#v with its error", tt.in, got)
		}
	}
}

// FuzzParseEndpoint checks that whatever ParseEndpoint accepts, its
// canonical form parses back to the same endpoint.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"unix:///run/x.sock", "/x", "tcp://[::1]:0", "tls://h:1", "h:01", ":4222", "ws://h:1/bus", "wss://h:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseEndpoint(s)
		if err != nil {
			if !errors.Is(err, ErrBadEndpoint) {
				t.Fatalf("error %v does not wrap ErrBadEndpoint", err)
			}
			return
		}
		again, err := ParseEndpoint(e.String())
		if err != nil || again != e {
			t.Fatalf("%q -> %#v -> %q -> %#v, %v", s, e, e.String(), again, err)
		}
	})
}
