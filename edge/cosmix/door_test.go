package cosmix

// The cosmix doors as the edge shares them: the HTTP server's bounds
// (edge.HTTPServer), the login place a connection holds until its
// upgrade, the first frame's deadline, the accept loop, and the refusals,
// counted by door and reason and written through the door's refusal log.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"busbar/broker"
	"busbar/edge"
	"busbar/edge/edgetest"
	"busbar/internal/testbroker"
)

// heldPlaces wraps a door's Hold, counting the places held now.
type heldPlaces struct{ n atomic.Int64 }

func (h *heldPlaces) wrap(hold edge.Hold) edge.Hold {
	return func(nc net.Conn) func() {
		release := hold(nc)
		h.n.Add(1)
		var once sync.Once
		return func() {
			once.Do(func() {
				h.n.Add(-1)
				release()
			})
		}
	}
}

func (h *heldPlaces) await(t *testing.T, want int64, what string) {
	t.Helper()
	testbroker.Eventually(t, wait, fmt.Sprintf("%d places held: %s", want, what), func() bool { return h.n.Load() == want })
}

// rawConn is a TCP connection to the cosmix listener that sends nothing
// yet.
func (e *env) rawConn() net.Conn {
	e.t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// upgradeHead is the request head of a WebSocket upgrade to url's path
// and query, padded with an X-Pad header to exactly size bytes.
func upgradeHead(t *testing.T, pathQuery string, size int) string {
	t.Helper()
	head := "GET " + pathQuery + " HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	const pad = "X-Pad: \r\n\r\n"
	n := size - len(head) - len(pad)
	if n < 0 {
		t.Fatalf("a head of %d bytes cannot hold the upgrade", size)
	}
	return head + "X-Pad: " + strings.Repeat("a", n) + "\r\n\r\n"
}

// status sends head on a fresh connection and returns the status code of
// the answer.
func (e *env) status(head string) int {
	e.t.Helper()
	c := e.rawConn()
	defer c.Close()
	if _, err := io.WriteString(c, head); err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		e.t.Fatalf("reading the answer to a head of %d bytes: %v", len(head), err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// headSlack is what net/http reads of a request head beyond its
// MaxHeaderBytes before it answers 431 (its initialReadLimitSize).
const headSlack = 4096

// The cosmix listener's request head is bounded as the core's HTTP
// listener's is: edge.HTTPMaxHeaderBytes (and net/http's slack) is
// upgraded, one byte more is 431.
func TestAnUpgradeHeadAtTheEdgesLimitIsServedAndOneByteMoreIs431(t *testing.T) {
	e := start(t, nil)
	pq := Path + "?" + TokenParam + "=local:" + e.bus.Secrets["local"]
	limit := edge.HTTPMaxHeaderBytes + headSlack
	if got := e.status(upgradeHead(t, pq, limit)); got != http.StatusSwitchingProtocols {
		t.Fatalf("a head of %d bytes: %d, want 101", limit, got)
	}
	if got := e.status(upgradeHead(t, pq, limit+1)); got != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a head of %d bytes: %d, want 431", limit+1, got)
	}
}

// The flood of the report: connections that each send an unfinished
// header of about 1 MiB. The cosmix listener reads at most
// edge.HTTPMaxHeaderBytes of each and closes it; the process's heap stays
// far below what the headers would take, and upgrades with a token go
// through meanwhile.
const (
	floodConns       = 256
	floodHeaderBytes = 1 << 20
	// floodHeapCeiling bounds how far the heap may grow during the
	// flood: an eighth of what the headers would hold.
	floodHeapCeiling = floodConns * floodHeaderBytes / 8
)

func TestAFloodOfUnfinishedHeadersIsBoundedAndUpgradesGoThrough(t *testing.T) {
	e := start(t, nil)
	a := e.dial() // warm up what an upgrade uses
	a.send("---\ncommand: noded.ping\nid: 1\ntype: request\n---\n")
	a.recvMsg()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse

	// The heap is sampled until every flood connection has been closed
	// by the server (a 431, or the login pool's refusal or eviction).
	var peak atomic.Uint64
	flooded := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-flooded:
				return
			case <-tick.C:
			}
		}
	})
	header := []byte("GET " + Path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Flood: " + strings.Repeat("a", floodHeaderBytes))
	var flood sync.WaitGroup
	var closed atomic.Int64
	for range floodConns {
		flood.Go(func() {
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			if _, err := c.Write(header); err == nil {
				_, _ = io.Copy(io.Discard, c) // until the server closes it
			}
			closed.Add(1)
		})
	}
	for i := range 5 {
		testbroker.Await(t, wait, fmt.Sprintf("upgrade %d during the flood", i), func() error {
			ws, _, err := websocket.Dial(ctxT(t), e.url(), nil)
			if err != nil {
				return err // refused by the login pool: retried, as a client would
			}
			defer ws.CloseNow()
			app := &app{t: t, ws: ws}
			app.send("---\ncommand: noded.ping\nid: 1\ntype: request\n---\n")
			if m := app.recvMsg(); m.Value("rc") != "0" {
				t.Fatalf("ping during the flood: %v", m)
			}
			return nil
		})
	}
	flood.Wait()
	close(flooded)
	sampler.Wait()
	grew := int64(peak.Load()) - int64(before)
	t.Logf("the heap grew by %.1f MiB at most under %d unfinished headers of %d KiB (%d closed)",
		float64(grew)/(1<<20), floodConns, floodHeaderBytes>>10, closed.Load())
	if grew > floodHeapCeiling {
		t.Fatalf("the heap grew by %d bytes, over the ceiling of %d", grew, floodHeapCeiling)
	}
}

// A connection holds a place of the shared login pool from its accept to
// its upgrade with a credential that logs in, or to its close; a 401
// keeps it. MaxHandshakesPerAddr places are held, one more is refused.
func TestALoginPlaceIsHeldFromAcceptToTheUpgradeOrTheClose(t *testing.T) {
	var held heldPlaces
	const places = 2
	e := startWith(t, broker.Options{MaxHandshakesPerAddr: places, HandshakeGrace: time.Hour, HandshakeIdleGrace: time.Hour},
		func(c *Config) { c.Door.Hold = held.wrap(c.Door.Hold) })
	raw1, raw2 := e.rawConn(), e.rawConn()
	held.await(t, places, "two connections that sent nothing")
	refusedBefore := e.bus.Broker.Stats().HandshakesRefused
	if ws, _, err := websocket.Dial(ctxT(t), e.url(), nil); err == nil {
		_ = ws.CloseNow()
		t.Fatalf("an upgrade past %d places held went through", places)
	}
	if got := e.bus.Broker.Stats().HandshakesRefused - refusedBefore; got != 1 {
		t.Fatalf("%d refused by the login pool, want 1", got)
	}

	_ = raw1.Close()
	held.await(t, places-1, "after a close")
	a := e.dial() // takes the free place, and gives it back at its upgrade
	held.await(t, places-1, "after an upgrade")
	b := e.dial() // would be one too many if a had kept its place
	for i, x := range []*app{a, b} {
		x.send(fmt.Sprintf("---\ncommand: noded.ping\nid: %d\ntype: request\n---\n", i))
		if m := x.recvMsg(); m.Value("rc") != "0" {
			t.Fatalf("ping: %v", m)
		}
	}

	// A request refused 401 keeps its connection, and its place, until it
	// closes.
	bad := e.rawConn()
	if _, err := io.WriteString(bad, upgradeHead(t, Path+"?"+TokenParam+"=local:wrong", 512)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(bad)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %v %v", resp, err)
	}
	_ = resp.Body.Close()
	held.await(t, places, "raw2 and the 401's connection")
	if ws, _, err := websocket.Dial(ctxT(t), e.url(), nil); err == nil {
		_ = ws.CloseNow()
		t.Fatal("an upgrade went through while a 401's connection held the last place")
	}
	_ = bad.Close()
	_ = raw2.Close()
	held.await(t, 0, "every connection that did not upgrade closed")
}

// An upgraded connection must send its first message within
// FirstFrameTimeout: one that sends none is closed, counted and logged;
// one that did send is kept past that time.
func TestAnUpgradeThatSendsNoFrameIsClosedAtFirstFrameTimeout(t *testing.T) {
	const timeout = time.Second
	logs := &edgetest.LogBuffer{}
	e := start(t, func(c *Config) {
		c.FirstFrameTimeout = timeout
		c.Door.Refusals = edge.NewRefusalLog(slog.New(slog.NewTextHandler(logs, nil)))
	})
	kept := e.dial()
	kept.send("---\n---\n") // the heartbeat is a frame
	if m := kept.recvMsg(); m.Value("error") != "Unknown noded command: ''" {
		t.Fatalf("the heartbeat answered %v", m)
	}
	began := time.Now()
	silent := e.dial()
	_, _, err := silent.ws.Read(ctxT(t))
	if err == nil {
		t.Fatal("a silent connection got a message")
	}
	if waited := time.Since(began); waited < timeout {
		t.Fatalf("a silent connection was closed after %v, before FirstFrameTimeout (%v)", waited, timeout)
	}
	key := Refusal{DoorTCP, RefusedNoFirstFrame}
	testbroker.Eventually(t, wait, "the silent connection counted", func() bool { return e.srv.Stats().Refused[key] == 1 })
	// kept's deadline was before silent's: it is served still.
	kept.send("---\ncommand: noded.ping\nid: 1\ntype: request\n---\n")
	if m := kept.recvMsg(); m.Value("rc") != "0" {
		t.Fatalf("ping on a connection that sent a frame in time: %v", m)
	}
	if got := e.srv.Stats().Refused[key]; got != 1 {
		t.Fatalf("%d connections closed for no first frame, want 1", got)
	}
	if line := logs.String(); !strings.Contains(line, refusalText[RefusedNoFirstFrame]) || !strings.Contains(line, "remote=127.0.0.1") ||
		!strings.Contains(line, "door=cosmix") {
		t.Fatalf("the refusal log: %q", line)
	}
}

// What a peer can have refused is counted by door and reason, and written
// through the door's refusal log (Door.Refusals), never to its log.
func TestEveryRefusalIsCountedByDoorAndReasonAndWrittenToTheRefusalLog(t *testing.T) {
	logs, other := &edgetest.LogBuffer{}, &edgetest.LogBuffer{}
	e := start(t, func(c *Config) {
		c.MaxConns = 1
		c.Door.Log = slog.New(slog.NewTextHandler(other, &slog.HandlerOptions{Level: slog.LevelWarn}))
		c.Door.Refusals = edge.NewRefusalLog(slog.New(slog.NewTextHandler(logs, nil)))
	})
	base := "ws://" + e.addr + Path
	if got := dialStatus(t, base+"?token=local:wrong", nil); got != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %d", got)
	}
	if got := dialStatus(t, base, nil); got != http.StatusUnauthorized {
		t.Fatalf("no token: %d", got)
	}
	if got := dialStatus(t, e.url(), http.Header{"Origin": {"http://evil.example"}}); got != http.StatusForbidden {
		t.Fatalf("a foreign origin: %d", got)
	}
	a := e.dial()
	if got := dialStatus(t, e.url(), nil); got != http.StatusServiceUnavailable {
		t.Fatalf("MaxConns+1: %d", got)
	}
	a.send("hello")
	if m := a.recvMsg(); m.Value("rc") != "10" {
		t.Fatalf("a message that is not a frame: %v", m)
	}
	a.send("---\n---\n" + strings.Repeat("a", MaxMessageBytes-len("---\n---\n")+1))
	if _, _, err := a.ws.Read(ctxT(t)); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("a message over MaxMessageBytes: %v", err)
	}
	want := map[Refusal]uint64{
		{DoorTCP, RefusedBadToken}: 2, {DoorTCP, RefusedOrigin}: 1, {DoorTCP, RefusedOverCapacity}: 1,
		{DoorTCP, RefusedMalformedFrame}: 1, {DoorTCP, RefusedTooBig}: 1,
	}
	testbroker.Eventually(t, wait, fmt.Sprintf("refusals %v", want), func() bool {
		got := e.srv.Stats().Refused
		for k, n := range want {
			if got[k] != n {
				return false
			}
		}
		return len(got) == len(want)
	})
	lines := logs.String()
	for k := range want {
		if !strings.Contains(lines, refusalText[k.Reason]) {
			t.Errorf("no %q in the refusal log:\n%s", refusalText[k.Reason], lines)
		}
	}
	if strings.Count(lines, "remote=127.0.0.1") != strings.Count(lines, "\n") {
		t.Errorf("a refusal without its source host:\n%s", lines)
	}
	if s := other.String(); s != "" {
		t.Errorf("the door's log has warnings:\n%s", s)
	}
}

// The cosmix listener's accept loop is the edge's: a temporary failure is
// counted under its door and retried, and the listener serves on.
func TestATemporaryAcceptFailureIsRetriedByTheEdge(t *testing.T) {
	bus := testbroker.Start(t, "inproc", broker.Options{})
	srv, err := New(Config{Dial: Dialer(bus.Broker), BrokerName: bus.Broker.Name(), Door: bus.Broker.Door()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	before := edge.AcceptFailures()[DoorTCP]
	served := make(chan error, 1)
	go func() { served <- srv.Serve(edgetest.EMFILE(ln, 1)) }()
	defer func() {
		_ = srv.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()
	e := &env{t: t, bus: bus, srv: srv, addr: ln.Addr().String()}
	a := e.dial()
	a.send("---\ncommand: noded.ping\nid: 1\ntype: request\n---\n")
	if m := a.recvMsg(); m.Value("rc") != "0" {
		t.Fatalf("ping after an accept failure: %v", m)
	}
	if got := edge.AcceptFailures()[DoorTCP] - before; got != 1 {
		t.Fatalf("%d accept failures counted for %s, want 1", got, DoorTCP)
	}
}
