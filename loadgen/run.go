package loadgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"busbar/client"
)

// Bounds of a run.
const (
	DefaultMsgs     = 100_000
	MaxDuration     = 10 * time.Minute       // no run lasts longer
	MinSize         = 8                      // room for the send timestamp
	progressEvery   = 100 * time.Millisecond // Progress callback period
	defaultChannel  = "bench"
	timestampOffset = 0
)

// Config describes a run. Msgs and Duration bound it; whichever comes first
// ends it (Msgs defaults to DefaultMsgs when both are zero).
type Config struct {
	Channel  string
	Size     int           // payload bytes, at least MinSize
	Msgs     int64         // messages in total, across clients
	Duration time.Duration // at most MaxDuration
	Progress func(done int64)
}

func (c *Config) normalise() error {
	if c.Channel == "" {
		c.Channel = defaultChannel
	}
	if c.Size < MinSize {
		return fmt.Errorf("loadgen: size %d is below the minimum of %d (the send timestamp)", c.Size, MinSize)
	}
	if c.Msgs < 0 || c.Duration < 0 {
		return errors.New("loadgen: negative bound")
	}
	if c.Msgs == 0 && c.Duration == 0 {
		c.Msgs = DefaultMsgs
	}
	if c.Duration == 0 || c.Duration > MaxDuration {
		c.Duration = MaxDuration
	}
	return nil
}

// Stamp writes the send time into the first MinSize bytes of a payload;
// AgeAt reads how long before now (unix ns) that was. The side-by-side
// harness (bench/) stamps NATS payloads with it too.
func Stamp(p []byte) { StampAt(p, time.Now().UnixNano()) }

// StampAt writes the time at (unix ns), such as a message's scheduled
// send time, as Stamp writes now.
func StampAt(p []byte, at int64) { binary.BigEndian.PutUint64(p[timestampOffset:], uint64(at)) }

// AgeAt is how long before now (unix ns) a payload was stamped (-1 when it
// is too short); the caller passes the clock it already read.
func AgeAt(p []byte, now int64) time.Duration {
	if len(p) < MinSize {
		return -1
	}
	return time.Duration(now - int64(binary.BigEndian.Uint64(p[timestampOffset:])))
}

// progress calls f with done's value until stop is closed.
func progress(f func(int64), done *atomic.Int64, stop <-chan struct{}) func() {
	if f == nil {
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				f(done.Load())
				return
			case <-t.C:
				f(done.Load())
			}
		}
	})
	return wg.Wait
}

// share splits n messages over k workers (0 for n means unbounded).
func share(n int64, k, i int) int64 {
	if n == 0 {
		return -1
	}
	s := n / int64(k)
	if int64(i) < n%int64(k) {
		s++
	}
	return s
}

// Publish emits stream messages from every client in pubs (one goroutine
// each) until the bound, and reports the publishers' side.
func Publish(ctx context.Context, pubs []*client.Client, cfg Config) (Result, error) {
	if err := cfg.normalise(); err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var sent, errs atomic.Int64
	var first firstError
	stop := make(chan struct{})
	waitProgress := progress(cfg.Progress, &sent, stop)
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range pubs {
		quota := share(cfg.Msgs, len(pubs), i)
		wg.Go(func() {
			ch := c.Scope("bench").Channel(cfg.Channel)
			payload := make([]byte, cfg.Size)
			for n := int64(0); (quota < 0 || n < quota) && ctx.Err() == nil; n++ {
				Stamp(payload)
				if err := ch.Emit(ctx, payload); err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
						first.keep(err)
					}
					return
				}
				sent.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	waitProgress()
	n := sent.Load()
	r := NewResult("pub", n, n*int64(cfg.Size), errs.Load(), elapsed, nil)
	r.FirstError = first.text()
	return r, nil
}

// Subscriber counts what arrives on one client.
type Subscriber struct {
	cfg      Config
	want     int64
	got      atomic.Int64
	bytes    atomic.Int64
	lat      Recorder
	first    atomic.Int64 // unix ns of the first arrival
	last     atomic.Int64
	complete chan struct{}
	once     sync.Once
	sub      *client.Subscription
}

// Subscribe starts counting on c; want is how many messages complete it (0:
// until Wait's bound).
func Subscribe(ctx context.Context, c *client.Client, cfg Config, want int64) (*Subscriber, error) {
	if err := cfg.normalise(); err != nil {
		return nil, err
	}
	s := &Subscriber{cfg: cfg, want: want, complete: make(chan struct{})}
	sub, err := c.Scope("bench").Channel(cfg.Channel).Subscribe(ctx, s.receive)
	if err != nil {
		return nil, err
	}
	s.sub = sub
	return s, nil
}

func (s *Subscriber) receive(_ context.Context, m *client.Message) {
	now := time.Now().UnixNano()
	s.first.CompareAndSwap(0, now)
	s.last.Store(now)
	p := m.Payload() // the receiver's own copy: no further copy per message
	if d := AgeAt(p, now); d >= 0 {
		s.lat.Add(d)
	}
	s.bytes.Add(int64(len(p)))
	if n := s.got.Add(1); s.want > 0 && n >= s.want {
		s.once.Do(func() { close(s.complete) })
	}
}

// Received is how many messages arrived so far.
func (s *Subscriber) Received() int64 { return s.got.Load() }

// Wait waits until the wanted count arrived, ctx ends, or idle passes with
// nothing new, then stops counting and reports.
func (s *Subscriber) Wait(ctx context.Context, idle time.Duration) Result {
	t := time.NewTicker(idle)
	defer t.Stop()
	last := int64(-1)
wait:
	for {
		select {
		case <-s.complete:
			break wait
		case <-ctx.Done():
			break wait
		case <-t.C:
			// Nothing new for a whole idle period ends the wait even when
			// nothing arrived at all: callers wait once the publishers are
			// done, and a run that lost everything must end and say so.
			n := s.got.Load()
			if n == last {
				break wait
			}
			last = n
		}
	}
	s.sub.Close()
	d := time.Duration(s.last.Load() - s.first.Load())
	return NewResult("sub", s.got.Load(), s.bytes.Load(), 0, d, s.lat.Summary())
}

// Request runs concurrency requesters on each client against target's
// handler for the channel, until the bound, timing every round trip.
func Request(ctx context.Context, clients []*client.Client, target string, concurrency int, cfg Config) (Result, error) {
	if err := cfg.normalise(); err != nil {
		return Result{}, err
	}
	if concurrency < 1 {
		return Result{}, errors.New("loadgen: concurrency must be at least 1")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var done, errs atomic.Int64
	var first firstError
	var lat Recorder
	stop := make(chan struct{})
	waitProgress := progress(cfg.Progress, &done, stop)
	workers := len(clients) * concurrency
	start := time.Now()
	var wg sync.WaitGroup
	for i := range workers {
		c := clients[i%len(clients)]
		quota := share(cfg.Msgs, workers, i)
		wg.Go(func() {
			ch := c.Scope("bench").Channel(cfg.Channel)
			payload := make([]byte, cfg.Size)
			for n := int64(0); quota < 0 || n < quota; n++ {
				t0 := time.Now()
				if _, err := ch.Request(ctx, target, payload); err != nil {
					if ctx.Err() != nil {
						return
					}
					errs.Add(1)
					first.keep(err)
					continue
				}
				lat.Add(time.Since(t0))
				done.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	waitProgress()
	n := done.Load()
	r := NewResult("req", n, 2*n*int64(cfg.Size), errs.Load(), elapsed, lat.Summary())
	r.FirstError = first.text()
	return r, nil
}

// firstError keeps the first error its goroutines report.
type firstError struct{ p atomic.Pointer[string] }

func (f *firstError) keep(err error) {
	s := err.Error()
	f.p.CompareAndSwap(nil, &s)
}

func (f *firstError) text() string {
	if s := f.p.Load(); s != nil {
		return *s
	}
	return ""
}

// Echo registers a handler on c that replies with the request's payload.
func Echo(ctx context.Context, c *client.Client, channel string) (*client.Registration, error) {
	if channel == "" {
		channel = defaultChannel
	}
	return c.Scope("bench").Channel(channel).Handle(ctx, func(_ context.Context, m *client.Message) ([]byte, error) {
		return m.Payload(), nil
	})
}
