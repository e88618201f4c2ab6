package relay

// Every limit at and past its edge (docs/relay-store.md#limits).

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// refused checks that pushing blob to device is refused with want.
func refused(t *testing.T, s *Store, device string, blob []byte, want *Refusal) {
	t.Helper()
	seq, err := s.Push(ctx(t), device, blob)
	if !errors.Is(err, want) {
		t.Fatalf("push of %d bytes to %q: seq %d, %v; want %v", len(blob), device, seq, err, want)
	}
	var r *Refusal
	if !errors.As(err, &r) || r.Temporary != want.Code.Temporary() {
		t.Fatalf("%v: not a *Refusal with Temporary %v", err, want.Code.Temporary())
	}
}

func TestMaxBlobBytes(t *testing.T) {
	s := open(t, "", Options{})
	push(t, s, "d", make([]byte, MaxBlobBytes))
	refused(t, s, "d", make([]byte, MaxBlobBytes+1), ErrTooLarge)
	refused(t, s, "d", nil, ErrMalformed)
	refused(t, s, "d", []byte{}, ErrMalformed)

	lower := open(t, "", Options{MaxBlobBytes: 1000})
	push(t, lower, "d", make([]byte, 1000))
	refused(t, lower, "d", make([]byte, 1001), ErrTooLarge)

	if _, err := Open(t.TempDir(), Options{MaxBlobBytes: MaxBlobBytes + 1}); err == nil {
		t.Fatal("opened with MaxBlobBytes over the ceiling")
	}
	if st := s.Stats(); st.Refused[TooLarge] != 1 || st.Refused[Malformed] != 2 {
		t.Fatalf("refusals counted %v", st.Refused)
	}
}

func TestDeviceIDs(t *testing.T) {
	s := open(t, "", Options{})
	good := []string{"a", strings.Repeat("x", MaxDeviceBytes), "Dev_1.phone-2", "3f2a9c", "q1w2E3r4_-"}
	bad := []string{"", strings.Repeat("x", MaxDeviceBytes+1), "a b", "a/b", "é", "a\x00", "alice@home", "a:b"}
	for _, d := range good {
		if err := ValidDevice(d); err != nil {
			t.Fatalf("ValidDevice(%q): %v", d, err)
		}
		push(t, s, d, []byte("x"))
		if _, err := s.Session(d); err != nil {
			t.Fatalf("session for %q: %v", d, err)
		}
	}
	for _, d := range bad {
		if err := ValidDevice(d); !errors.Is(err, ErrMalformed) {
			t.Fatalf("ValidDevice(%q): %v", d, err)
		}
		refused(t, s, d, []byte("x"), ErrMalformed)
		if _, err := s.Session(d); !errors.Is(err, ErrMalformed) {
			t.Fatalf("session for %q: %v", d, err)
		}
		if err := s.Ack(d, 1); !errors.Is(err, ErrMalformed) {
			t.Fatalf("ack for %q: %v", d, err)
		}
	}
}

func TestMaxInboxBlobs(t *testing.T) {
	s := open(t, "", Options{MaxInboxBlobs: 5})
	var seqs []Seq
	for range 5 {
		seqs = append(seqs, push(t, s, "d", []byte("x")))
	}
	refused(t, s, "d", []byte("x"), ErrInboxFull)
	push(t, s, "other", []byte("x")) // one inbox's limit only
	if err := s.Ack("d", seqs[0]); err != nil {
		t.Fatal(err)
	}
	push(t, s, "d", []byte("x")) // room for one again
	refused(t, s, "d", []byte("x"), ErrInboxFull)
}

func TestMaxInboxBytes(t *testing.T) {
	s := open(t, "", Options{MaxInboxBytes: 1000})
	a := push(t, s, "d", make([]byte, 600))
	push(t, s, "d", make([]byte, 400)) // exactly at the limit
	refused(t, s, "d", []byte("x"), ErrInboxFull)
	push(t, s, "other", make([]byte, 1000))
	if err := s.Ack("d", a); err != nil {
		t.Fatal(err)
	}
	refused(t, s, "d", make([]byte, 601), ErrInboxFull)
	push(t, s, "d", make([]byte, 600))
	if in := s.Inbox("d"); in.Blobs != 2 || in.Bytes != 1000 {
		t.Fatalf("inbox %+v", in)
	}
}

// The whole store's blob bytes are bounded, all inboxes together: made-up
// device ids cannot take the disk.
func TestMaxStoreBytes(t *testing.T) {
	s := open(t, "", Options{MaxStoreBytes: 1000})
	a := push(t, s, "d1", make([]byte, 600))
	push(t, s, "d2", make([]byte, 400)) // exactly at the limit
	refused(t, s, "d3", []byte("x"), ErrInboxFull)
	if err := s.Ack("d1", a); err != nil {
		t.Fatal(err)
	}
	refused(t, s, "d3", make([]byte, 601), ErrInboxFull)
	push(t, s, "d3", make([]byte, 600))
	checkCounts(t, s)
}

// The inboxes holding a blob are bounded: a push to a new device past it
// is refused, one to a device that holds a blob is not, and an inbox
// emptied by acks makes room.
func TestMaxInboxes(t *testing.T) {
	s := open(t, "", Options{MaxInboxes: 3})
	var first Seq
	for i := range 3 {
		seq := push(t, s, fmt.Sprint("d", i), []byte("x"))
		if i == 0 {
			first = seq
		}
	}
	refused(t, s, "d3", []byte("x"), ErrInboxFull)
	push(t, s, "d0", []byte("x")) // not a new inbox
	checkCounts(t, s)
	if _, err := s.AckRange("d0", 1, first+10); err != nil {
		t.Fatal(err)
	}
	push(t, s, "d3", []byte("x"))
	refused(t, s, "d4", []byte("x"), ErrInboxFull)
	checkCounts(t, s)
}

// Pushes admitted but not yet synced count against an inbox's limits, so
// concurrent pushes cannot overshoot them.
func TestInboxLimitsCountPendingPushes(t *testing.T) {
	release := make(chan struct{})
	s := open(t, "", Options{MaxInboxBlobs: 3, hooks: &hooks{sync: func(f *os.File, _ []Seq) error {
		<-release
		return syncData(f)
	}}})
	errs := make(chan error, 10)
	for range 10 {
		go func() {
			_, err := s.Push(ctx(t), "d", []byte("x"))
			errs <- err
		}()
	}
	full := 0
	for range 7 {
		if err := <-errs; !errors.Is(err, ErrInboxFull) {
			t.Fatalf("while 3 pushes wait for their fsync: %v", err)
		}
		full++
	}
	if in := s.Inbox("d"); in.Pending != 3 || in.Blobs != 0 {
		t.Fatalf("inbox %+v", in)
	}
	close(release)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if in := s.Inbox("d"); in.Pending != 0 || in.Blobs != 3 {
		t.Fatalf("inbox %+v", in)
	}
}

func TestMaxPushRate(t *testing.T) {
	clk := newClock()
	s := open(t, "", Options{Now: clk.Now, MaxPushRate: 10, PushBurst: 3})
	for range 3 {
		push(t, s, "d", []byte("x"))
	}
	refused(t, s, "d", []byte("x"), ErrRateLimited)
	push(t, s, "other", []byte("x")) // each inbox has its own bucket
	clk.Add(99 * time.Millisecond)
	refused(t, s, "d", []byte("x"), ErrRateLimited)
	clk.Add(time.Millisecond) // 1/10 s: one token
	push(t, s, "d", []byte("x"))
	refused(t, s, "d", []byte("x"), ErrRateLimited)
	clk.Add(time.Hour) // the bucket refills to its depth, no further
	for range 3 {
		push(t, s, "d", []byte("x"))
	}
	refused(t, s, "d", []byte("x"), ErrRateLimited)

	if st := s.Stats(); st.Refused[RateLimited] != 4 {
		t.Fatalf("rate refusals counted: %d", st.Refused[RateLimited])
	}

	unlimited := open(t, "", Options{Now: clk.Now, MaxPushRate: -1, PushBurst: 1})
	for range 50 {
		push(t, unlimited, "d", []byte("x"))
	}
}

// A push refused InboxFull spends no token of the push rate.
func TestRefusalsSpendNothing(t *testing.T) {
	clk := newClock()
	s := open(t, "", Options{Now: clk.Now, MaxPushRate: 1, PushBurst: 2, MaxInboxBlobs: 1})
	a := push(t, s, "d", []byte("x"))
	refused(t, s, "d", []byte("x"), ErrInboxFull)
	refused(t, s, "d", []byte("x"), ErrInboxFull)
	if err := s.Ack("d", a); err != nil {
		t.Fatal(err)
	}
	push(t, s, "d", []byte("x")) // the second token is still there
}

func TestTTLLimit(t *testing.T) {
	for _, ttl := range []time.Duration{MaxTTL + time.Nanosecond, 31 * 24 * time.Hour, -time.Second} {
		if s, err := Open(t.TempDir(), Options{TTL: ttl, Logger: quiet}); err == nil {
			s.Close()
			t.Fatalf("opened with TTL %v", ttl)
		}
	}
	for _, ttl := range []time.Duration{0, MaxTTL, time.Hour} {
		s := open(t, "", Options{TTL: ttl})
		if want := max(ttl, 0); ttl == 0 && s.opts.TTL != DefaultTTL || ttl != 0 && s.opts.TTL != want {
			t.Fatalf("TTL %v became %v", ttl, s.opts.TTL)
		}
	}
	if DefaultTTL != 30*24*time.Hour || MaxTTL != DefaultTTL {
		t.Fatalf("DefaultTTL %v, MaxTTL %v: the contract says 30 days both", DefaultTTL, MaxTTL)
	}
}

func TestOptionsRefusedAtOpen(t *testing.T) {
	for _, o := range []Options{{MaxInboxBlobs: -1}, {MaxInboxBytes: -1}, {PushBurst: -1}, {SegmentBytes: -1}, {SweepInterval: -1}, {MaxBlobBytes: -1}} {
		if s, err := Open(t.TempDir(), o); err == nil {
			s.Close()
			t.Fatalf("opened with %+v", o)
		}
	}
}

func TestRefusalsCarryNoContent(t *testing.T) {
	for c := TooLarge; c <= Internal; c++ {
		r := &Refusal{Code: c, Temporary: c.Temporary()}
		if c.String() == "" || strings.HasPrefix(c.String(), "code(") {
			t.Fatalf("code %d has no name", c)
		}
		if !errors.Is(r, &Refusal{Code: c}) || errors.Is(r, &Refusal{Code: c + 1}) {
			t.Fatalf("errors.Is by code fails for %v", c)
		}
		if got, ok := RefusalCode(r); !ok || got != c {
			t.Fatalf("RefusalCode: %v %v", got, ok)
		}
	}
	if TooLarge.Temporary() || Malformed.Temporary() || !InboxFull.Temporary() || !RateLimited.Temporary() || !Unavailable.Temporary() || !Internal.Temporary() {
		t.Fatal("permanent: too large and malformed; temporary: the rest")
	}
	if Code(0).Temporary() || Code(99).Temporary() || Code(99).String() != "code(99)" {
		t.Fatal("an unknown code")
	}
	// What a refused push's error says, whatever the device and blob.
	s := open(t, "", Options{MaxInboxBlobs: 1})
	secret := []byte("SECRET-PAYLOAD")
	push(t, s, "device-7", secret)
	_, err := s.Push(ctx(t), "device-7", secret)
	if msg := err.Error(); strings.Contains(msg, "device-7") || bytes.Contains([]byte(msg), secret) || msg != "relay: push refused: inbox full (temporary)" {
		t.Fatalf("refusal says %q", msg)
	}
}
