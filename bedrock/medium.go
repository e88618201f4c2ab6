package bedrock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
)

// Medium is the shared broadcast channel: in Minecraft,
// system.sendScriptEvent and the scriptEventReceive event. A message sent
// reaches every listener, the sender's own included (the bus drops its
// echoes by instance id).
type Medium interface {
	// Send broadcasts one message on channel id; an error drops it.
	Send(id, message string) error
	// Listen calls f for every message received, until stop is called.
	Listen(f func(id, message string)) (stop func())
}

// WorldOptions shape an in-memory World's channel.
type WorldOptions struct {
	Loss      float64 // probability that a message is lost (for each listener)
	Duplicate float64 // probability that a message is delivered twice (for each listener)
	Reorder   bool    // shuffle what one tick delivers
	PerTick   int     // at most this many messages delivered per tick; the rest wait (0: no cap)
	MaxLen    int     // a longer message (in UTF-16 code units) makes Send fail (0: no cap)
	Seed      uint64  // for the random choices
}

// World is an in-memory broadcast channel for many nodes in one process,
// driven by a Clock: what is sent during tick N is delivered at tick N+1
// (or later, under PerTick), with optional loss, duplication and
// reordering — for tests and simulation.
type World struct {
	opts WorldOptions
	mu   sync.Mutex
	rng  *rand.Rand
	subs map[int]func(id, message string)
	next int
	q    []worldMsg
	sent int64
	stop func()
}

type worldMsg struct{ id, message string }

// ErrTooLong is a World's refusal of a message over its MaxLen.
var ErrTooLong = errors.New("bedrock: message over the medium's size cap")

// NewWorld returns a world delivering on clock.
func NewWorld(clock Clock, opts WorldOptions) *World {
	w := &World{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)), subs: map[int]func(string, string){}}
	w.stop = clock.Every(1, w.deliver)
	return w
}

// Close stops delivering.
func (w *World) Close() { w.stop() }

// Sent is how many messages were broadcast.
func (w *World) Sent() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sent
}

// Send implements Medium.
func (w *World) Send(id, message string) error {
	if w.opts.MaxLen > 0 && len16(message) > w.opts.MaxLen {
		return ErrTooLong
	}
	w.mu.Lock()
	w.q = append(w.q, worldMsg{id, message})
	w.sent++
	w.mu.Unlock()
	return nil
}

// Listen implements Medium.
func (w *World) Listen(f func(id, message string)) func() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	k := w.next
	w.subs[k] = f
	return func() {
		w.mu.Lock()
		delete(w.subs, k)
		w.mu.Unlock()
	}
}

func (w *World) deliver() {
	w.mu.Lock()
	batch := w.q
	if w.opts.PerTick > 0 && len(batch) > w.opts.PerTick {
		batch = batch[:w.opts.PerTick]
	}
	w.q = w.q[len(batch):]
	if w.opts.Reorder {
		w.rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
	}
	type delivery struct {
		f   func(string, string)
		msg worldMsg
	}
	var out []delivery
	keys := make([]int, 0, len(w.subs))
	for k := range w.subs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, m := range batch {
		for _, k := range keys {
			if w.rng.Float64() < w.opts.Loss {
				continue
			}
			out = append(out, delivery{w.subs[k], m})
			if w.rng.Float64() < w.opts.Duplicate {
				out = append(out, delivery{w.subs[k], m})
			}
		}
	}
	w.mu.Unlock()
	for _, d := range out {
		d.f(d.msg.id, d.msg.message)
	}
}

// LineMedium carries one message per line over a byte stream (a
// JavaScript runtime's or a game server console's stdin and stdout):
// every line written is a message on ChannelID, every line read one
// received on ChannelID. Messages are JSON text, which has no raw
// newlines; one that has is refused.
type LineMedium struct {
	w  io.Writer
	mu sync.Mutex // serialises writes
	r  *bufio.Reader

	lmu  sync.Mutex
	subs map[int]func(id, message string)
	next int
	done chan struct{}
	err  error
}

// MaxLineBytes bounds a line a LineMedium reads; a longer one is skipped.
const MaxLineBytes = 64 << 10

// NewLineMedium reads lines from r (one goroutine, until r ends; Wait
// joins it) and writes to w.
func NewLineMedium(r io.Reader, w io.Writer) *LineMedium {
	m := &LineMedium{w: w, r: bufio.NewReaderSize(r, 4096), subs: map[int]func(string, string){}, done: make(chan struct{})}
	go m.read()
	return m
}

// Send implements Medium; only ChannelID is carried.
func (m *LineMedium) Send(id, message string) error {
	if id != ChannelID {
		return fmt.Errorf("bedrock: the line medium carries only %s", ChannelID)
	}
	if strings.ContainsAny(message, "\r\n") {
		return errors.New("bedrock: a message with a newline cannot travel on a line")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := io.WriteString(m.w, message+"\n")
	return err
}

// Listen implements Medium.
func (m *LineMedium) Listen(f func(id, message string)) func() {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	m.next++
	k := m.next
	m.subs[k] = f
	return func() {
		m.lmu.Lock()
		delete(m.subs, k)
		m.lmu.Unlock()
	}
}

// Wait returns when the input has ended, with its error (nil at EOF).
func (m *LineMedium) Wait() error {
	<-m.done
	return m.err
}

func (m *LineMedium) read() {
	defer close(m.done)
	for {
		line, err := m.readLine()
		if line != "" {
			m.lmu.Lock()
			fs := make([]func(string, string), 0, len(m.subs))
			for _, f := range m.subs {
				fs = append(fs, f)
			}
			m.lmu.Unlock()
			for _, f := range fs {
				f(ChannelID, line)
			}
		}
		if err != nil {
			if err != io.EOF {
				m.err = err
			}
			return
		}
	}
}

// readLine reads one line without its end; an over-long line is skipped
// whole.
func (m *LineMedium) readLine() (string, error) {
	var b []byte
	skip := false
	for {
		chunk, err := m.r.ReadSlice('\n')
		if !skip {
			if len(b)+len(chunk) > MaxLineBytes+1 {
				skip, b = true, nil
			} else {
				b = append(b, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if skip {
			b = nil
		}
		return strings.TrimRight(string(b), "\r\n"), err
	}
}
