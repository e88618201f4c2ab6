package moonbridge

// A real broker, a real MoonBridge listener on 127.0.0.1:0, and a backend
// that speaks the protocol's bytes over TCP, as MoonBridge's Java client
// does.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/edge"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
)

// wait bounds every wait for an event in these tests: it is never a
// margin a test relies on, only how long a broken test takes to fail.
const wait = 20 * time.Second

const secretA = "0123456789abcdef0123456789abcdef-a"

// islands may be any island-* node; it may send, request and publish on
// mb:*, receive events on mb:*, and handle mb:ask and mb:slow.
func islands(keyID, secret string) auth.Principal {
	return auth.Principal{Name: "isl-" + keyID, Nodes: []auth.Pattern{"island-*"}, MoonBridge: &auth.MoonBridgeKey{KeyID: keyID, Secret: secret},
		Permissions: auth.Permissions{Send: []auth.Pattern{"mb:*"}, Request: []auth.Pattern{"mb:*"}, Publish: []auth.Pattern{"mb:*"},
			Subscribe: []auth.Pattern{"mb:*"}, Handle: []auth.Pattern{"mb:ask", "mb:slow", "mb:slow2", "mb:*"}}}
}

// logBuf is a slog handler's output, safe to read while written.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type env struct {
	t        *testing.T
	bus      *testbroker.Env
	srv      *Server
	addr     string
	log      *logBuf
	refusals *edge.RefusalLog // the door's, writing to log
	dialer   net.Dialer       // what backends dial with
}

// start runs a broker and a MoonBridge server in front of it, on the
// broker's door as busbar serve sets it up: the broker's admission (its
// login pools), and a refusal log of the server's own over e.log so that
// tests read what it wrote.
func start(t *testing.T, mod func(*Config), extra ...auth.Principal) *env {
	t.Helper()
	return startWith(t, broker.Options{}, nil, mod, extra...)
}

// startWith is start with the broker's options, and a wrapper for the
// server's listener (nil: none).
func startWith(t *testing.T, opts broker.Options, wrap func(net.Listener) net.Listener, mod func(*Config), extra ...auth.Principal) *env {
	t.Helper()
	e := &env{t: t, bus: testbroker.Start(t, "tcp", opts), log: &logBuf{}}
	ps := append([]auth.Principal{islands("primary", secretA)}, extra...)
	keys, err := auth.NewStore(ps)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.refusals = edge.NewRefusalLog(logger)
	cfg := Config{Keys: keys, ProxyNode: e.bus.Broker.Name(), Dial: e.bus.Broker.DialInProcessAs,
		Door: edge.Door{Log: logger, Refusals: e.refusals, Hold: e.bus.Broker.HoldLoginPlace}}
	if mod != nil {
		mod(&cfg)
	}
	e.srv, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = l.Addr().String()
	if wrap != nil {
		l = wrap(l)
	}
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(l) }()
	t.Cleanup(func() {
		e.srv.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return e
}

// node connects a busbar node over the broker's real socket.
func (e *env) node(name string) *client.Client { return testclient.Connect(e.t, e.bus, name) }

func ctxT(t testing.TB, d time.Duration) context.Context { return testclient.Ctx(t, d) }

// backend is a MoonBridge backend speaking raw frames.
type backend struct {
	t    *testing.T
	nc   net.Conn
	r    *bufio.Reader
	name string
	reg  Registered
	op   int64
}

func registration(name, instance, keyID string) Register {
	return Register{InstanceID: instance, Name: name, Address: "tcp://127.0.0.1:25565", Generation: NewUUID().String(), KeyID: keyID}
}

// dial connects and registers reg signed with secret; it returns the
// error the registration met (io.EOF: closed without a frame).
func (e *env) dial(reg Register, secret string) (*backend, error) {
	e.t.Helper()
	nc, err := e.dialer.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(wait))
	b := &backend{t: e.t, nc: nc, r: bufio.NewReader(nc), name: reg.Name}
	f, err := ReadFrame(b.r)
	if err != nil {
		// A server at capacity closes before its hello; the caller decides
		// whether that is the failure (its slot frees only once the
		// connection that held it has been wound down).
		return nil, err
	}
	hello, err := DecodeHello(f)
	if err != nil || hello.Version != Version {
		e.t.Fatalf("hello %+v: %v", hello, err)
	}
	reg.Signature = Sign([]byte(secret), hello.Nonce, &reg)
	frame, err := EncodeRegister(reg)
	if err != nil {
		e.t.Fatal(err)
	}
	b.write(frame)
	f, err = ReadFrame(b.r)
	if err != nil {
		return nil, err
	}
	b.reg, err = DecodeRegistered(f)
	if err != nil {
		e.t.Fatalf("registered: %v", err)
	}
	return b, nil
}

// register connects a backend that must be accepted.
func (e *env) register(name string) *backend {
	e.t.Helper()
	b, err := e.dial(registration(name, name, "primary"), secretA)
	if err != nil {
		e.t.Fatalf("registering %s: %v", name, err)
	}
	return b
}

func (b *backend) write(frame []byte) {
	b.t.Helper()
	if err := WriteFrame(b.nc, frame); err != nil {
		b.t.Fatal(err)
	}
}

// next reads the next frame, decoded.
func (b *backend) next() any {
	b.t.Helper()
	f, err := ReadFrame(b.r)
	if err != nil {
		b.t.Fatalf("%s reading: %v", b.name, err)
	}
	v, err := Decode(f)
	if err != nil {
		b.t.Fatalf("%s: %v", b.name, err)
	}
	return v
}

func (b *backend) nextMessage() MessageFrame {
	b.t.Helper()
	v := b.next()
	m, ok := v.(MessageFrame)
	if !ok {
		b.t.Fatalf("%s: got %#v, want a MESSAGE", b.name, v)
	}
	return m
}

func (b *backend) nextResponse() Response {
	b.t.Helper()
	v := b.next()
	p, ok := v.(Response)
	if !ok {
		b.t.Fatalf("%s: got %#v, want a RESPONSE", b.name, v)
	}
	return p
}

// message sends a MESSAGE and returns its operation id.
func (b *backend) message(kind Kind, channel string, target *Endpoint, timeout int64, payload string) (int64, Message) {
	b.t.Helper()
	b.op++
	m := Message{ID: NewUUID(), Kind: kind, Channel: channel, Source: BackendEndpoint(b.name), Target: target, Payload: []byte(payload)}
	frame, err := EncodeMessage(MessageFrame{OperationID: b.op, TimeoutMillis: timeout, Message: m})
	if err != nil {
		b.t.Fatal(err)
	}
	b.write(frame)
	return b.op, m
}

// call sends a MESSAGE and reads its RESPONSE (nothing else may arrive
// meanwhile).
func (b *backend) call(kind Kind, channel string, target *Endpoint, payload string) (Response, Message) {
	b.t.Helper()
	op, m := b.message(kind, channel, target, MaxTimeoutMillis, payload)
	p := b.nextResponse()
	if p.OperationID != op {
		b.t.Fatalf("response to op %d, want %d", p.OperationID, op)
	}
	return p, m
}

func (b *backend) respond(p Response) {
	b.t.Helper()
	frame, err := EncodeResponse(p)
	if err != nil {
		b.t.Fatal(err)
	}
	b.write(frame)
}

// closedWithoutFrame reads until the server closes, failing on any frame.
func (b *backend) closedWithoutFrame() {
	b.t.Helper()
	f, err := ReadFrame(b.r)
	if err == nil {
		b.t.Fatalf("%s: got frame %x, want the connection closed", b.name, f)
	}
	if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
		b.t.Fatalf("%s: %v, want EOF", b.name, err)
	}
}

// inDirectory waits until node is (or is not) in the broker's directory.
func (e *env) inDirectory(c *client.Client, node string, want bool) {
	e.t.Helper()
	testbroker.Await(e.t, wait, fmt.Sprintf("%s in the directory: %v", node, want), func() error {
		nodes, err := c.Directory(ctxT(e.t, wait))
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Node == node {
				if want {
					return nil
				}
				return errors.New("still there")
			}
		}
		if want {
			return errors.New("not there")
		}
		return nil
	})
}
