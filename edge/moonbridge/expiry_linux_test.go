package moonbridge

// Expiry at write time (the seed's §6: timeouts cover queueing, and an
// expired queued message is never transmitted later), against a backend
// that does not read. The kernel's buffers between the server and the
// backend are made small (socket options, Linux's rules: it reports
// twice what it grants), so that what the test reads is what the writer
// wrote, and when: a frame larger than both buffers is written only
// while the backend reads.

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
)

// pipeBuffer is the send buffer asked for the server's side of each
// backend connection, and the receive buffer for the backend's: the
// kernel then holds at most sendBuffer+receiveBuffer (what it reports)
// of the bytes the writer wrote and the backend has not read.
const pipeBuffer = 8 << 10

// bigPayload is a payload that fills more than both buffers: 60 KB.
const bigPayload = 60_000

func sockopt(t *testing.T, nc net.Conn, opt int) int {
	t.Helper()
	raw, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := raw.Control(func(fd uintptr) { v, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, opt) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return v
}

// smallPipe starts a server whose accepted connections get a send
// buffer of pipeBuffer, and backends that dial with a receive buffer of
// pipeBuffer set before they connect. accepted hands out the server's
// side of each connection.
func smallPipe(t *testing.T) (e *env, accepted chan net.Conn) {
	accepted = make(chan net.Conn, 16)
	e = startWith(t, broker.Options{}, func(l net.Listener) net.Listener {
		return &smallSendListener{Listener: l, accepted: accepted}
	}, nil)
	e.dialer.Control = func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, pipeBuffer)
		})
		return errors.Join(err, serr)
	}
	return e, accepted
}

type smallSendListener struct {
	net.Listener
	accepted chan net.Conn
}

func (l *smallSendListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err == nil {
		_ = nc.(*net.TCPConn).SetWriteBuffer(pipeBuffer)
		select {
		case l.accepted <- nc:
		default:
		}
	}
	return nc, err
}

// session is the live session of a backend name, or nil.
func (e *env) session(name string) *session {
	e.srv.mu.Lock()
	defer e.srv.mu.Unlock()
	return e.srv.sessions[name]
}

// openTowardsBackend is how many of busbar's operations are open towards
// the backend, and how many frames wait in its writer's queue.
func (ss *session) openTowardsBackend() (open, queued int) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.toBack), ss.w.Len()
}

// deadlineOf is the deadline of the open operation towards the backend
// whose payload is payload.
func (ss *session) deadlineOf(t *testing.T, payload string) time.Time {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, in := range ss.toBack {
		if string(in.msg.Payload) == payload {
			return in.deadline
		}
	}
	t.Fatalf("no open operation with payload %q", payload)
	return time.Time{}
}

// What MoonBridge measured: MaxInflight requests of 60 KB to a backend
// that does not read all time out for their callers, and the backend
// must then not read them anyway. A frame is written only while its
// deadline has not passed: what the backend reads afterwards is at most
// what the kernel held when the deadlines passed (both buffers) and the
// one frame being written then; every other frame is dropped, never
// written, and counted. Each frame read claims no more than the caller's
// budget.
func TestExpiredMessagesAreNeverWritten(t *testing.T) {
	e, accepted := smallPipe(t)
	alpha := e.node("alpha")
	b := e.register("island-a")
	server := <-accepted
	pipe := sockopt(t, server, syscall.SO_SNDBUF) + sockopt(t, b.nc, syscall.SO_RCVBUF)

	const budget = 1500 * time.Millisecond
	ask := alpha.Scope("app").Channel("mb:ask")
	errs := make(chan error, MaxInflight)
	for range MaxInflight {
		go func() {
			_, err := ask.Request(ctxT(t, budget), "island-a", make([]byte, bigPayload))
			errs <- err
		}()
	}
	for range MaxInflight {
		if err := <-errs; !errors.Is(err, client.ErrTimeout) {
			t.Fatalf("a request to a backend that does not read: %v, want a timeout", err)
		}
	}
	// Every caller has given up, and once the server has ended every
	// operation at its own deadline (each hop counts a deadline from when
	// it received the message) every frame still queued has expired.
	ss := e.session("island-a")
	testbroker.Eventually(t, wait, "every operation ended at the server", func() bool {
		open, _ := ss.openTowardsBackend()
		return open == 0
	})
	// What the backend reads now, up to the PONG queued behind them all:
	b.write(EncodeEmpty(TypeHeartbeat))
	read := 0
	for {
		v := b.next()
		if v == TypePong {
			break
		}
		f, ok := v.(MessageFrame)
		if !ok {
			t.Fatalf("got %#v", v)
		}
		if f.TimeoutMillis > budget.Milliseconds() {
			t.Fatalf("a frame claims %d ms of a budget of %v", f.TimeoutMillis, budget)
		}
		read++
	}
	frame := bigPayload + 100 // a MESSAGE's header is well under 100 bytes
	if bound := pipe/frame + 1; read > bound {
		t.Fatalf("the backend read %d frames after their deadlines passed; the buffers (%d bytes) held at most %d", read, pipe, bound)
	}
	// Each operation that reached the server (all of them, unless the
	// machine is slow enough for some to expire in the broker first) was
	// either read or dropped.
	ss.mu.Lock()
	opened := ss.nextOp
	ss.mu.Unlock()
	if n := e.srv.Expired(); int64(read)+int64(n) != opened || opened > MaxInflight {
		t.Fatalf("%d frames read and %d dropped as expired, want the %d that reached the server in all", read, n, opened)
	}
}

// A frame's timeout is what is left when it is written, not when it was
// queued; a frame whose deadline passed while it was queued is dropped.
// A big frame fills the pipe, so the writer writes nothing more until
// the backend reads: behind it wait a request with a long budget and one
// with a short one. Once the short one's caller has timed out, the
// backend reads: the big frame, then the long one, claiming no more than
// it had left at that point; the short one never comes.
func TestTimeoutIsWhatIsLeftAtWrite(t *testing.T) {
	e, _ := smallPipe(t)
	alpha := e.node("alpha")
	b := e.register("island-a")
	ss := e.session("island-a")
	ask := alpha.Scope("app").Channel("mb:ask")
	var wg sync.WaitGroup
	defer wg.Wait()
	request := func(ctx context.Context, payload []byte, errs chan<- error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := ask.Request(ctx, "island-a", payload)
			errs <- err
		}()
	}
	bigErr, longErr, shortErr := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	request(ctxT(t, wait), make([]byte, bigPayload), bigErr)
	testbroker.Eventually(t, wait, "the big frame in the writer", func() bool {
		open, queued := ss.openTowardsBackend()
		return open == 1 && queued == 0
	})
	request(ctxT(t, wait), []byte("long"), longErr)
	request(ctxT(t, time.Second), []byte("short"), shortErr)
	testbroker.Eventually(t, wait, "both queued behind it", func() bool {
		open, queued := ss.openTowardsBackend()
		return open == 3 && queued == 2
	})
	if err := <-shortErr; !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("the short request: %v, want a timeout", err)
	}
	testbroker.Eventually(t, wait, "the short one ended at the server", func() bool {
		open, _ := ss.openTowardsBackend()
		return open == 2
	})
	longDeadline := ss.deadlineOf(t, "long")
	reading := time.Now() // the writer writes the long one after this

	big := b.nextMessage()
	if len(big.Message.Payload) != bigPayload {
		t.Fatalf("first frame: %d bytes of payload", len(big.Message.Payload))
	}
	f := b.nextMessage()
	if string(f.Message.Payload) != "long" {
		t.Fatalf("after the big frame: %q, want the long request (the short one expired)", f.Message.Payload)
	}
	if left := longDeadline.Sub(reading); time.Duration(f.TimeoutMillis)*time.Millisecond > left {
		t.Fatalf("the long request claims %d ms; it had %v left when the backend began to read", f.TimeoutMillis, left)
	}
	b.write(EncodeEmpty(TypeHeartbeat))
	if v := b.next(); v != TypePong {
		t.Fatalf("after the long request: %#v, want the PONG (nothing expired is written)", v)
	}
	if n := e.srv.Expired(); n != 1 {
		t.Fatalf("%d frames dropped as expired, want 1", n)
	}
	for _, m := range []MessageFrame{big, f} {
		r := Message{ID: NewUUID(), Kind: KindReply, Channel: m.Message.Channel, Source: *m.Message.Target, Target: &m.Message.Source, ReplyTo: &m.Message.ID}
		b.respond(Response{OperationID: m.OperationID, Type: ResponseReply, Reply: &r})
	}
	for _, ch := range []chan error{bigErr, longErr} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
}
