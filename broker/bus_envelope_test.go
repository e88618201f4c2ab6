package broker

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

var testKeyMaterial = []byte("0123456789abcdef0123456789abcdef")

func newTestKey(t *testing.T, seal bool) *busKey {
	t.Helper()
	k, err := newBusKey(testKeyMaterial, seal)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// envelopeOf is the NATS message a broker with k sends on subject.
func envelopeOf(k *busKey, subject string, hdr nats.Header, body []byte) *nats.Msg {
	return &nats.Msg{Subject: subject, Data: k.wrap(nil, subject, hdr, body)}
}

// TestBusEnvelopeCarriesSubjectHeadersAndBody: what one broker wraps, with
// or without sealing, another with the same key opens to the same headers
// and body; sealed, none of it is readable on the way.
func TestBusEnvelopeCarriesSubjectHeadersAndBody(t *testing.T) {
	for _, seal := range []bool{false, true} {
		k := newTestKey(t, seal)
		hdr := nats.Header{"op": {"push"}, "dev": {"d1"}, "multi": {"a", "b"}}
		body := []byte("a payload nobody else should read")
		m := envelopeOf(k, "busbar.relay.b2.b1", hdr, body)
		if got := bytes.Contains(m.Data, body); got == seal {
			t.Fatalf("sealed %v: body readable in the envelope: %v", seal, got)
		}
		if len(m.Data) > len(body)+envelopeRoom(len(m.Subject), 64) {
			t.Fatalf("envelope of %d bytes for a %d-byte body: over envelopeRoom", len(m.Data), len(body))
		}
		if err := k.open(m, &freshness{}, time.Now()); err != nil {
			t.Fatalf("sealed %v: %v", seal, err)
		}
		if !bytes.Equal(m.Data, body) || m.Header.Get("op") != "push" || strings.Join(m.Header.Values("multi"), ",") != "a,b" || len(m.Header) != 3 {
			t.Fatalf("sealed %v: opened to %q %v", seal, m.Data, m.Header)
		}
		// No headers: none after opening, even if NATS added some.
		m = envelopeOf(k, "busbar.dir.b1", nil, []byte("{}"))
		m.Header = nats.Header{"injected": {"x"}}
		if err := k.open(m, &freshness{}, time.Now()); err != nil || m.Header != nil || string(m.Data) != "{}" {
			t.Fatalf("sealed %v: %v, headers %v, body %q", seal, err, m.Header, m.Data)
		}
	}
}

// TestBusEnvelopeRefusesEveryChangedByte: flipping any bit of an envelope,
// in either mode, makes it fail the key.
func TestBusEnvelopeRefusesEveryChangedByte(t *testing.T) {
	for _, seal := range []bool{false, true} {
		k := newTestKey(t, seal)
		orig := k.wrap(nil, "busbar.state.b1", nats.Header{"h": {"v"}}, []byte(`{"ns":"app"}`))
		for i := range orig {
			for bit := range 8 {
				d := bytes.Clone(orig)
				d[i] ^= 1 << bit
				err := k.open(&nats.Msg{Subject: "busbar.state.b1", Data: d}, &freshness{}, time.Now())
				if err == nil {
					t.Fatalf("sealed %v: byte %d bit %d flipped, yet opened", seal, i, bit)
				}
			}
		}
	}
}

// TestBusEnvelopeRefusesStrangersMovesAndReplays: a message without an
// envelope, one wrapped with another key, one moved to another subject,
// one taken twice and one stamped outside BusKeyWindow are each refused
// with their own reason; stamps at the window's edge pass.
func TestBusEnvelopeRefusesStrangersMovesAndReplays(t *testing.T) {
	k := newTestKey(t, false)
	other, err := newBusKey([]byte("another key of the same length, 32+"), false)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct {
		name string
		m    *nats.Msg
		want error
	}{
		{"plain JSON", &nats.Msg{Subject: "busbar.dir.b1", Data: []byte(`{"broker":"b1"}`)}, errEnvelope},
		{"empty", &nats.Msg{Subject: "busbar.dir.b1"}, errEnvelope},
		{"unknown mode", &nats.Msg{Subject: "busbar.dir.b1", Data: append([]byte{9}, make([]byte, envFixed)...)}, errEnvelope},
		{"another key", envelopeOf(other, "busbar.dir.b1", nil, []byte("{}")), errForged},
		{"moved", func() *nats.Msg {
			m := envelopeOf(k, "busbar.dir.b1", nil, []byte("{}"))
			m.Subject = "busbar.dir.b2"
			return m
		}(), errMoved},
	} {
		if err := k.open(tc.m, &freshness{}, now); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}

	f := &freshness{}
	first := k.wrap(nil, "busbar.claim.b1", nil, []byte("1"))
	second := k.wrap(nil, "busbar.claim.b1", nil, []byte("2"))
	open := func(d []byte, at time.Time) error {
		return k.open(&nats.Msg{Subject: "busbar.claim.b1", Data: bytes.Clone(d)}, f, at)
	}
	if err := open(first, now); err != nil {
		t.Fatal(err)
	}
	if err := open(first, now); !errors.Is(err, errReplayed) {
		t.Fatalf("the same message again: %v, want replayed", err)
	}
	if err := open(second, now); err != nil {
		t.Fatalf("the next message: %v", err)
	}
	if err := open(first, now); !errors.Is(err, errReplayed) {
		t.Fatalf("an earlier message after a later one: %v, want replayed", err)
	}
	// Another subscription keeps its own account: the first is new there.
	if err := k.open(&nats.Msg{Subject: "busbar.claim.b1", Data: bytes.Clone(first)}, &freshness{}, now); err != nil {
		t.Fatal(err)
	}

	// The window, seen from a receiver whose clock is ahead or behind.
	m := k.wrap(nil, "busbar.bye.b1", nil, nil)
	stamp := time.Unix(0, k.clock.Load())
	for _, tc := range []struct {
		at   time.Time
		want error
	}{
		{stamp.Add(BusKeyWindow), nil},
		{stamp.Add(BusKeyWindow + 1), errStale},
		{stamp.Add(-BusKeyWindow), nil},
		{stamp.Add(-BusKeyWindow - 1), errStale},
	} {
		err := k.open(&nats.Msg{Subject: "busbar.bye.b1", Data: bytes.Clone(m)}, &freshness{}, tc.at)
		if !errors.Is(err, tc.want) && (tc.want != nil || err != nil) {
			t.Errorf("received %v after its stamp: %v, want %v", tc.at.Sub(stamp), err, tc.want)
		}
	}
}

// TestBusEnvelopeForgetsProcessesPastTheWindow: a subscription keeps the
// last stamp of each sender's process only while its messages could still
// pass the window.
func TestBusEnvelopeForgetsProcessesPastTheWindow(t *testing.T) {
	f := &freshness{}
	now := time.Now()
	for range 100 {
		k := newTestKey(t, false) // a process each
		if err := k.open(envelopeOf(k, "busbar.dir.b1", nil, nil), f, now); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.last) != 100 {
		t.Fatalf("%d processes kept, want 100", len(f.last))
	}
	k := newTestKey(t, false)
	later := now.Add(BusKeyWindow + time.Second)
	k.clock.Store(later.UnixNano()) // a process whose clock reads later
	if err := k.open(envelopeOf(k, "busbar.dir.b1", nil, nil), f, later); err != nil {
		t.Fatal(err)
	}
	if len(f.last) != 1 {
		t.Fatalf("%d processes kept past the window, want 1 (the live one)", len(f.last))
	}
}

// TestBusKeyMaterialBounds: a key of BusKeyMinBytes passes, one byte less
// is refused, white space around it does not count; a key file others
// may read is refused, as credentials are.
func TestBusKeyMaterialBounds(t *testing.T) {
	min := strings.Repeat("k", BusKeyMinBytes)
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{min, true},
		{min[1:], false},
		{"  \n" + min[1:] + "\n", false},
		{min + "\n", true},
		{strings.Repeat("k", BusKeyMaxBytes), true},
		{strings.Repeat("k", BusKeyMaxBytes+1), false},
	} {
		if _, err := newBusKey([]byte(tc.key), false); (err == nil) != tc.ok {
			t.Errorf("a key of %d bytes: %v, want ok %v", len(tc.key), err, tc.ok)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "bus.key")
	if err := os.WriteFile(path, []byte(min+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadBusKey(path); err != nil || string(got) != min+"\n" {
		t.Fatalf("ReadBusKey: %q, %v", got, err)
	}
	if runtime.GOOS == "windows" {
		return // the owner-only rule is the ACL's there (internal/ownerperm's tests)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadBusKey(path); err == nil || !strings.Contains(err.Error(), "other users could read it") {
		t.Fatalf("a key file of mode 0644: %v", err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte(min[1:]), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadBusKey(short); err == nil || !strings.Contains(err.Error(), "fewer than 32") {
		t.Fatalf("a key file of 31 bytes: %v", err)
	}
}
