package client

import (
	"testing"
	"time"
)

// TestReconnectWaitDoublesUpToItsMaximum: the wait before pass n is drawn
// from [bound/2, bound], bound doubling from ReconnectWaitMin and held at
// ReconnectWaitMax from the pass that would exceed it on (no overflow
// however many passes).
func TestReconnectWaitDoublesUpToItsMaximum(t *testing.T) {
	o := Options{ReconnectWaitMin: 100 * time.Millisecond, ReconnectWaitMax: 800 * time.Millisecond}
	bounds := map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		4: 800 * time.Millisecond, 5: 800 * time.Millisecond, 40: 800 * time.Millisecond, 1000: 800 * time.Millisecond}
	for pass, bound := range bounds {
		for range 200 {
			if w := o.reconnectWait(pass); w < bound/2 || w > bound {
				t.Fatalf("pass %d: wait %v outside [%v, %v]", pass, w, bound/2, bound)
			}
		}
	}
}

// TestReconnectWaitDefaults: unset bounds take the defaults, and a
// maximum below the minimum is raised to it.
func TestReconnectWaitDefaults(t *testing.T) {
	var o Options
	o.setDefaults()
	if o.ReconnectWaitMin != DefaultReconnectWaitMin || o.ReconnectWaitMax != DefaultReconnectWaitMax || o.MaxReconnects != DefaultMaxReconnects {
		t.Fatalf("defaults %v %v %d", o.ReconnectWaitMin, o.ReconnectWaitMax, o.MaxReconnects)
	}
	o = Options{ReconnectWaitMin: time.Second, ReconnectWaitMax: time.Millisecond}
	o.setDefaults()
	if o.ReconnectWaitMax != time.Second {
		t.Fatalf("max %v, want raised to the minimum", o.ReconnectWaitMax)
	}
}

// TestEndpointsList: Server may hold several endpoints separated by
// commas, Servers adds more; a malformed one is refused.
func TestEndpointsList(t *testing.T) {
	o := Options{Server: "unix:///a.sock, tcp://127.0.0.1:1", Servers: []string{"tcp://127.0.0.1:2"}}
	got, err := o.endpoints()
	if err != nil || len(got) != 3 || got[0] != "unix:///a.sock" || got[1] != "tcp://127.0.0.1:1" || got[2] != "tcp://127.0.0.1:2" {
		t.Fatalf("endpoints %q %v", got, err)
	}
	if _, err := (&Options{Server: "unix:///a.sock,nonsense://x"}).endpoints(); err == nil {
		t.Fatal("a malformed endpoint was accepted")
	}
	if _, err := (&Options{}).endpoints(); err == nil {
		t.Fatal("no server was accepted")
	}
}
