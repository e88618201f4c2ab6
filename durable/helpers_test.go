package durable

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"busbar/relay"
	"busbar/seal"
)

// storeRelay is the Relay over a real relay.Store, as the broker serves
// it: the recipient comes from the blob's clear header, refusals become
// RefusedError by code.
type storeRelay struct {
	st       *relay.Store
	idle     time.Duration // a session's Next ends with errDrained after this long with nothing to deliver
	receives atomic.Int32

	mu     sync.Mutex
	before func(blob []byte) error // a fault before the store sees the push
	after  func(blob []byte) error // a fault after the store has it (a lost ack)
	pushes int
}

var errDrained = errors.New("test: inbox drained")

var codes = map[relay.Code]string{
	relay.TooLarge: CodeTooLarge, relay.Malformed: CodeMalformed, relay.InboxFull: CodeInboxFull,
	relay.RateLimited: CodeRateLimited, relay.Unavailable: CodeUnavailable, relay.Internal: CodeInternal,
}

func (r *storeRelay) Push(ctx context.Context, blob []byte) (uint64, error) {
	r.mu.Lock()
	r.pushes++
	before, after := r.before, r.after
	r.mu.Unlock()
	if before != nil {
		if err := before(blob); err != nil {
			return 0, err
		}
	}
	to, err := seal.PeekRecipient(blob)
	if err != nil {
		return 0, &RefusedError{Code: CodeMalformed}
	}
	seq, err := r.st.Push(ctx, to.String(), blob)
	if c, ok := relay.RefusalCode(err); ok {
		return 0, &RefusedError{Code: codes[c]}
	}
	if err != nil {
		return 0, err
	}
	if after != nil {
		if err := after(blob); err != nil {
			return 0, err
		}
	}
	return uint64(seq), nil
}

func (r *storeRelay) pushCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pushes
}

func (r *storeRelay) Receive(ctx context.Context, me *seal.Identity) (Session, error) {
	r.receives.Add(1)
	ss, err := r.st.Session(me.ID().String())
	if err != nil {
		return nil, err
	}
	return &storeSession{r: r, ss: ss, dev: me.ID().String()}, nil
}

type storeSession struct {
	r   *storeRelay
	ss  *relay.Session
	dev string
}

func (s *storeSession) Next(ctx context.Context) (uint64, []byte, error) {
	nctx := ctx
	if s.r.idle > 0 {
		var cancel context.CancelFunc
		nctx, cancel = context.WithTimeout(ctx, s.r.idle)
		defer cancel()
	}
	b, err := s.ss.Next(nctx)
	if err != nil && ctx.Err() == nil && nctx.Err() != nil {
		return 0, nil, errDrained
	}
	return uint64(b.Seq), b.Data, err
}

func (s *storeSession) Ack(ctx context.Context, seq uint64) error {
	return s.r.st.Ack(s.dev, relay.Seq(seq))
}

func newRelay(t testing.TB, opts relay.Options) *storeRelay {
	t.Helper()
	if opts.MaxPushRate == 0 {
		opts.MaxPushRate = -1
	}
	st, err := relay.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &storeRelay{st: st, idle: 150 * time.Millisecond}
}

// clock is a fake clock, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

// t0 is the real time when the tests start, so that a device on the fake
// clock and one on the real clock agree about the replay window.
var t0 = time.Now().UTC().Truncate(time.Millisecond)

func newClock() *clock { return &clock{t: t0} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func testOpts(c *clock) Options {
	o := Options{HandlerBackoff: time.Millisecond, LockTimeout: 10 * time.Second}
	if c != nil {
		o.Now = c.Now
	}
	return o
}

func newDevice(t testing.TB, opts Options) *Device {
	t.Helper()
	d, err := Init(t.TempDir()+"/dev", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// reopen is the same device in another process (or after a restart).
func reopen(t testing.TB, d *Device, opts Options) *Device {
	t.Helper()
	d2, err := Open(d.Dir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d2.Close() })
	return d2
}

// group makes group "home" of devs, created by devs[0], held by all.
func group(t testing.TB, devs ...*Device) *seal.Manifest {
	t.Helper()
	m, err := devs[0].CreateGroup("home", "device 0")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs[1:] {
		if m, err = m.Add(devs[0].Identity(), d.Identity().Public(), ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range devs {
		if err := d.InstallGroup(m); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func send(t testing.TB, d *Device, body string) seal.MessageID {
	t.Helper()
	id, err := d.Send(context.Background(), "home", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func flush(t testing.TB, d *Device, r Relay) FlushResult {
	t.Helper()
	res, err := d.Flush(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// collector is a handler that records what it is given.
type collector struct {
	mu   sync.Mutex
	msgs []Message
	fail func(m Message) error
}

func (c *collector) handle(ctx context.Context, m Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, m)
	if c.fail != nil {
		return c.fail(m)
	}
	return nil
}

func (c *collector) bodies() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []string
	for _, m := range c.msgs {
		s = append(s, string(m.Body))
	}
	return s
}

// drain registers c on d, runs one receive session until the inbox has
// nothing more, and returns Run's error (errDrained when all went well).
func drain(t testing.TB, d *Device, r *storeRelay, c *collector) error {
	t.Helper()
	cancel, err := d.OnMessage(c.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	return d.Run(ctx, r)
}

func mustDrain(t testing.TB, d *Device, r *storeRelay, c *collector) {
	t.Helper()
	if err := drain(t, d, r, c); !errors.Is(err, errDrained) {
		t.Fatalf("Run: %v", err)
	}
}

func takeEvents(t testing.TB, d *Device) []Event {
	t.Helper()
	evs, _, err := d.TakeEvents()
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func inbox(r *storeRelay, d *Device) int { return r.st.Inbox(d.ID().String()).Blobs }

func relayOpts() relay.Options { return relay.Options{} }
