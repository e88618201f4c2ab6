package cosmix

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"busbar/client"
	"busbar/edge"
	"busbar/internal/testbroker"
	"busbar/wire"
)

func TestAMessageThatIsNotAFrameIsRC10AndTheConnectionLives(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.send("hello")
	a.expect("---\nerror: Invalid Bus message: Bus message must start with '---\\n', got: \"hello\"\nrc: 10\n---\n")
	// Without its closing line, a frame is still one, as noded reads it.
	a.send("---\ncommand: noded.ping\nid: 2\ntype: request")
	a.expect("---\ncommand: noded.ping\nfrom: noded\nid: 2\nrc: 0\ntype: response\n---\n" + pingBody + "\n")
	a.send("---\ncommand: noded.ping\nid: 1\ntype: request\n---\n")
	a.expect("---\ncommand: noded.ping\nfrom: noded\nid: 1\nrc: 0\ntype: response\n---\n" + pingBody + "\n")
}

// noded reads the heartbeat as a frame to itself with no command, and
// answers it so; a binary message it ignores.
func TestAHeartbeatIsAnsweredAsNodedAnswersItAndABinaryMessageIsNot(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.send("---\n---\n")
	a.expect("---\nerror: Unknown noded command: ''\nfrom: noded\nrc: 10\ntype: response\n---\n")
	if err := a.ws.Write(ctxT(t), websocket.MessageBinary, []byte(registerFrame)); err != nil {
		t.Fatal(err)
	}
	a.send("---\ncommand: noded.ping\nid: 1\ntype: request\n---\n")
	a.expect("---\ncommand: noded.ping\nfrom: noded\nid: 1\nrc: 0\ntype: response\n---\n" + pingBody + "\n")
}

func TestAFrameOfMaxMessageBytesIsServedAndOneByteMoreClosesTheConnection(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	head := "---\ncommand: noded.ping\nid: 1\ntype: request\n---\n"
	at := head + strings.Repeat("a", MaxMessageBytes-len(head))
	a.send(at)
	a.expect("---\ncommand: noded.ping\nfrom: noded\nid: 1\nrc: 0\ntype: response\n---\n" + pingBody + "\n")
	a.send(at + "a")
	_, _, err := a.ws.Read(ctxT(t))
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("read after an oversized message: %v, want close status 1009", err)
	}
}

func TestAConnectionWithoutAGoodTokenIs401(t *testing.T) {
	e := start(t, nil)
	base := "ws://" + e.addr + Path
	for _, url := range []string{base, base + "?token=local", base + "?token=local:wrong", base + "?token=nobody:x"} {
		if got := dialStatus(t, url, nil); got != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", url, got)
		}
	}
	h := http.Header{"Authorization": {"Bearer local:" + e.bus.Secrets["local"]}}
	ws, _, err := websocket.Dial(ctxT(t), base, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		t.Fatalf("with a Bearer header: %v", err)
	}
	_ = ws.CloseNow()
}

func TestAPageFromAnotherOriginIs403AndALoopbackPageIsServed(t *testing.T) {
	e := start(t, nil)
	if got := dialStatus(t, e.url(), http.Header{"Origin": {"http://evil.example"}}); got != http.StatusForbidden {
		t.Fatalf("status %d, want 403", got)
	}
	ws, _, err := websocket.Dial(ctxT(t), e.url(), &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://localhost:8080"}}})
	if err != nil {
		t.Fatalf("a loopback page: %v", err)
	}
	_ = ws.CloseNow()
}

func TestListenTakesOnlyALoopbackAddress(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:0", ":0", "example.com:0"} {
		if _, err := Listen(addr); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("%s: %v, want ErrNotLoopback", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0"} {
		ln, err := Listen(addr)
		if err != nil {
			t.Logf("%s: %v (no such interface here?)", addr, err)
			continue
		}
		_ = ln.Close()
	}
}

func TestMaxConnsAreServedAndOneMoreIs503(t *testing.T) {
	e := start(t, func(c *Config) { c.MaxConns = 2 })
	a := e.dial()
	e.dial()
	if got := dialStatus(t, e.url(), nil); got != http.StatusServiceUnavailable {
		t.Fatalf("connection MaxConns+1: status %d, want 503", got)
	}
	_ = a.ws.CloseNow()
	// Its place comes back once the server has seen it go.
	testbroker.Await(t, wait, "a place after a connection closed", func() error {
		ws, _, err := websocket.Dial(ctxT(t), e.url(), nil)
		if err == nil {
			_ = ws.CloseNow()
		}
		return err
	})
}

func TestMaxCallsIntoAnAppAreTakenAndOneMoreIsRC20(t *testing.T) {
	e := start(t, func(c *Config) { c.MaxCalls = 1 })
	b := e.dial()
	b.register("service-b", 1)
	ch := e.node("alpha").Scope("t").Channel(CallChannel)
	first := make(chan error, 1)
	go func() {
		_, err := ch.Request(ctxT(t), "service-b", []byte(`{"command":"one"}`))
		first <- err
	}()
	m := b.recvMsg() // the first waits in the app
	_, err := ch.Request(ctxT(t), "service-b", []byte(`{"command":"two"}`))
	var re *client.RequestError
	if !errors.As(err, &re) || re.RC != wire.RCFailure || re.Text != "Service 'service-b' overloaded (1 calls waiting)" {
		t.Fatalf("call MaxCalls+1: %v", err)
	}
	b.send(frame(map[string]string{"id": m.Value("id"), "rc": "0", "type": "response"}, ""))
	if err := <-first; err != nil {
		t.Fatalf("the call at the limit: %v", err)
	}
}

func TestMaxCallsFromAnAppAreMadeAndOneMoreIsRC20(t *testing.T) {
	e := start(t, func(c *Config) { c.MaxCalls = 1 })
	alpha := e.node("alpha")
	release := make(chan struct{})
	if _, err := alpha.Scope("t").Channel("slow.op").Handle(ctxT(t), func(ctx context.Context, _ *client.Message) ([]byte, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return []byte("done"), nil
	}); err != nil {
		t.Fatal(err)
	}
	a := e.dial()
	a.send("---\ncommand: slow.op\nid: 1\nto: alpha.bus\ntype: request\n---\n")
	testBusy(t, e, alpha)
	a.send("---\ncommand: slow.op\nid: 2\nto: alpha.bus\ntype: request\n---\n")
	a.expect("---\nerror: too many calls in flight on this connection (1)\nid: 2\nrc: 20\ntype: response\n---\n")
	close(release)
	a.expect("---\nbroker_origin: local\ncommand: slow.op\nfrom: alpha.bus\nid: 1\nrc: 0\ntype: response\n---\ndone\n")
}

// testBusy waits until the server's one connection has a call in flight.
func testBusy(t *testing.T, e *env, _ *client.Client) {
	t.Helper()
	testbroker.Eventually(t, wait, "a call in flight", func() bool {
		e.srv.mu.Lock()
		defer e.srv.mu.Unlock()
		for s := range e.srv.sessions {
			return len(s.calls) == 1
		}
		return false
	})
}

func TestTheOutboundQueueTakesOutboundQueueFramesAndDropsOneMore(t *testing.T) {
	srv := &Server{}
	s := &session{srv: srv, w: edge.NewMessageWriter(func([]byte) error { return nil }, edge.WriterOptions{Queue: OutboundQueue})}
	defer s.w.Close() // never started: nothing to wait for
	for i := range OutboundQueue {
		if !s.enqueue(wire.Empty()) {
			t.Fatalf("frame %d refused", i+1)
		}
	}
	if s.enqueue(wire.Empty()) || s.dropped.Load() != 1 || srv.Dropped() != 1 {
		t.Fatalf("frame OutboundQueue+1 was queued (dropped %d, server %d)", s.dropped.Load(), srv.Dropped())
	}
}

func TestALoginTheBrokerDoesNotAnswerWithinLoginTimeoutIs503(t *testing.T) {
	var held []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	e := start(t, func(c *Config) {
		c.LoginTimeout = 100 * time.Millisecond
		c.Dial = func(context.Context) (net.Conn, error) { // a broker that never answers
			a, b := net.Pipe()
			mu.Lock()
			held = append(held, b)
			mu.Unlock()
			return a, nil
		}
	})
	if got := dialStatus(t, e.url(), nil); got != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", got)
	}
}

func TestAnAppThatStopsReadingIsClosedAfterWriteTimeout(t *testing.T) {
	e := start(t, func(c *Config) { c.WriteTimeout = 50 * time.Millisecond })
	b := e.dial()
	b.register("service-b", 1) // and from now on b reads nothing
	alpha := e.node("alpha")
	ch := alpha.Scope("t").Channel(CallChannel)
	payload := []byte(`{"command":"fill","body":"` + strings.Repeat("x", 512<<10) + `"}`)
	for i := 0; ; i++ {
		if i == 4096 { // 2 GiB: no socket buffers that large
			t.Fatal("the connection of an app that reads nothing was not closed")
		}
		if _, err := ch.Send(ctxT(t), "service-b", payload); err != nil {
			t.Fatal(err)
		}
		if infos, err := alpha.Whois(ctxT(t), "service-b"); err == nil && len(infos) == 0 {
			return // its writer gave up, and its node left
		}
	}
}
