package port

// A port's limits at and past their edges, and peers that send garbage or
// never finish: each gets a clear rc 20 reply, and the port keeps serving.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
)

const greetReq = "---\ncommand: greet\n---\n{\"name\":\"ann\"}\n"
const greetReply = "---\nrc: 0\n---\n{\"greeting\":\"hello ann\"}\n"

func TestMaxRequestBytesEdge(t *testing.T) {
	cfg := notes()
	cfg.MaxRequestBytes = len(greetReq)
	path, _ := serve(t, cfg)
	if got := rawCall(t, path, greetReq); got != greetReply {
		t.Fatalf("at the limit: %q", got)
	}
	want := fmt.Sprintf("---\nerror: request larger than %d bytes (MaxRequestBytes)\nrc: 20\n---\n", len(greetReq))
	if got := rawCall(t, path, greetReq+" "); got != want {
		t.Fatalf("one byte past: %q, want %q", got, want)
	}
	// Far past: the caller is still writing when the port answers and
	// closes; CallPort still reads the answer.
	_, err := CallPort(ctxT(t, 10*time.Second), path, "greet", map[string]string{"name": strings.Repeat("x", 4<<20)})
	var pe *Error
	if !errors.As(err, &pe) || pe.RC != 20 || !strings.Contains(pe.Text, "MaxRequestBytes") {
		t.Fatalf("4 MiB request: %v", err)
	}
	if got := rawCall(t, path, greetReq); got != greetReply {
		t.Fatalf("after: %q", got)
	}
}

func TestGarbageGetsAClearReply(t *testing.T) {
	path, _ := serve(t, notes())
	cases := []struct{ name, req, says string }{
		{"nothing", "", "empty request"},
		{"whitespace", " \n\n", "empty request"},
		{"not a frame", "hello\n", "malformed request"},
		{"binary", "\x00\xff\xfe---\n", "malformed request"},
		{"no closing line", "---\ncommand: greet\n", "malformed request"},
		{"no command", "---\nx: 1\n---\n", "missing 'command' header"},
		{"empty command", "---\ncommand: \n---\n", "missing 'command' header"},
		{"arguments not JSON", "---\ncommand: greet\n---\nname=ann\n", `arguments of "greet" are not JSON`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := rawCall(t, path, c.req)
			if !strings.HasPrefix(got, "---\nerror: ") || !strings.Contains(got, c.says) || !strings.HasSuffix(got, "\nrc: 20\n---\n") {
				t.Fatalf("reply %q, want rc 20 saying %q", got, c.says)
			}
		})
	}
	if got := rawCall(t, path, greetReq); got != greetReply {
		t.Fatalf("after the garbage: %q", got)
	}
}

func TestSlowPeerCannotStallThePort(t *testing.T) {
	cfg := notes()
	cfg.ReadTimeout = 300 * time.Millisecond
	path, _ := serve(t, cfg)
	slow := dialRaw(t, path)
	defer slow.Close()
	if _, err := io.WriteString(slow, "---\ncommand: gr"); err != nil { // and never finishes
		t.Fatal(err)
	}
	// Others are served while it dawdles...
	if got := rawCall(t, path, greetReq); got != greetReply {
		t.Fatalf("while a peer is slow: %q", got)
	}
	// ...and at its deadline it is told why, and closed.
	want := "---\nerror: request not complete within 300ms (ReadTimeout): end it by shutting down the write side\nrc: 20\n---\n"
	if got := readReply(t, slow); got != want {
		t.Fatalf("slow peer got %q", got)
	}
}

func TestMaxConnsEdge(t *testing.T) {
	cfg := notes()
	cfg.MaxConns = 2
	path, _ := serve(t, cfg)
	held := dialRaw(t, path) // sends nothing: holds a slot
	defer held.Close()
	if got := rawCall(t, path, greetReq); got != greetReply { // the second slot
		t.Fatalf("at the limit: %q", got)
	}
	held2 := dialRaw(t, path)
	defer held2.Close()
	// Connections are accepted in order, so both slots are taken now.
	busy := dialRaw(t, path)
	defer busy.Close()
	want := "---\nerror: port notes is busy: 2 connections already (MaxConns)\nrc: 20\n---\n"
	if got := readReply(t, busy); got != want {
		t.Fatalf("one past the limit: %q", got)
	}
	held.Close() // frees a slot once the port has answered it
	testbroker.Eventually(t, 10*time.Second, "a slot free again", func() bool { return greets(t, path) })
}

func TestHandlerTimeout(t *testing.T) {
	cfg := notes()
	cfg.HandlerTimeout = 100 * time.Millisecond
	cfg.Commands["wait"] = Command{Description: "waits for its context", Run: func(ctx context.Context, _ json.RawMessage) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	path, _ := serve(t, cfg)
	want := "---\nerror: command did not finish within 100ms (HandlerTimeout)\nrc: 20\n---\n"
	if got := rawCall(t, path, "---\ncommand: wait\n---\n"); got != want {
		t.Fatalf("%q", got)
	}
}

func TestCloseAnswersThoseWaiting(t *testing.T) {
	path, s := serve(t, notes())
	held := dialRaw(t, path)
	defer held.Close()
	if got := rawCall(t, path, greetReq); got != greetReply { // held is being served now
		t.Fatalf("%q", got)
	}
	s.Close()
	want := "---\nerror: port notes is closing\nrc: 20\n---\n"
	if got := readReply(t, held); got != want {
		t.Fatalf("held connection got %q", got)
	}
	if _, err := CallPort(ctxT(t, 5*time.Second), path, "greet", nil); !errors.As(err, new(*TransportError)) {
		t.Fatalf("after Close: %v, want a TransportError", err)
	}
}

// A caller that never reads its (large) reply holds its connection only
// until WriteTimeout: with one slot, the next caller is then served.
func TestWriteTimeoutFreesTheSlot(t *testing.T) {
	cfg := notes()
	cfg.MaxConns = 1
	cfg.WriteTimeout = 200 * time.Millisecond
	cfg.Commands["big"] = Command{Description: "a reply larger than a socket buffer", Run: func(context.Context, json.RawMessage) (any, error) {
		return strings.Repeat("x", 8<<20), nil
	}}
	path, _ := serve(t, cfg)
	deaf := dialRaw(t, path)
	defer deaf.Close()
	if _, err := io.WriteString(deaf, "---\ncommand: big\n---\n"); err != nil {
		t.Fatal(err)
	}
	_ = deaf.CloseWrite() // and never reads
	testbroker.Eventually(t, 10*time.Second, "the slot back after WriteTimeout", func() bool { return greets(t, path) })
}

func TestMaxReplyBytesEdge(t *testing.T) {
	head := "---\nrc: 0\n---\n\""
	for _, c := range []struct {
		size int
		ok   bool
	}{{MaxReplyBytes, true}, {MaxReplyBytes + 1, false}} {
		reply := head + strings.Repeat("x", c.size-len(head)-2) + "\"\n"
		path, _ := cosmixPort(t, reply)
		r, err := CallPort(ctxT(t, 20*time.Second), path, "x", nil)
		var te *TransportError
		if c.ok && (err != nil || len(r.Body) != c.size-len(head)) || !c.ok && !errors.As(err, &te) {
			t.Fatalf("reply of %d bytes: %v", c.size, err)
		}
	}
}

// greets reports whether a greet call gets its reply (not "busy").
func greets(t *testing.T, path string) bool {
	c := dialRaw(t, path)
	defer c.Close()
	_, _ = io.WriteString(c, greetReq)
	_ = c.CloseWrite()
	b, _ := io.ReadAll(c)
	return string(b) == greetReply
}

// The requests being read share MaxRequestMemory: a call that fits what
// is left is served, one that does not is answered rc 20 at once, and
// the bytes come back when a request is done.
func TestMaxRequestMemoryEdge(t *testing.T) {
	cfg := notes()
	cfg.MaxRequestMemory = 2 * firstRead // two first buffers
	path, s := serve(t, cfg)
	left := func(want int64) func() bool { return func() bool { return s.mem.left.Load() == want } }
	hold := func() *net.UnixConn { // a request begun and never ended: it holds its first buffer
		c := dialRaw(t, path)
		if _, err := io.WriteString(c, "-"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	held := hold()
	defer held.Close()
	testbroker.Eventually(t, 10*time.Second, "the first request's buffer taken", left(firstRead))
	if got := rawCall(t, path, greetReq); got != greetReply { // takes the rest, exactly
		t.Fatalf("at the limit: %q", got)
	}
	testbroker.Eventually(t, 10*time.Second, "its bytes given back", left(firstRead))
	held2 := hold()
	defer held2.Close()
	testbroker.Eventually(t, 10*time.Second, "the budget spent", left(0))
	want := fmt.Sprintf("---\nerror: port notes is busy: the requests being read hold %d bytes already (MaxRequestMemory)\nrc: 20\n---\n", cfg.MaxRequestMemory)
	c := dialRaw(t, path)
	_, _ = io.WriteString(c, greetReq) // the port may answer before reading it
	got, _ := io.ReadAll(c)            // and close with the request unread: a reset may follow the reply
	if string(got) != want {
		t.Fatalf("past the limit: %q", got)
	}
	c.Close()
	held.Close()
	testbroker.Eventually(t, 10*time.Second, "a held request's bytes given back", left(firstRead))
	if got := rawCall(t, path, greetReq); got != greetReply {
		t.Fatalf("after room was made: %q", got)
	}
}

// A request's buffer grows by doubling, each growth taken from the budget
// with the old buffer still counted, and all of it comes back: a request
// of the 1 MiB limit needs 1.5 MiB of it, and holds 1 MiB once read.
func TestRequestBuffersGrowWithinTheBudget(t *testing.T) {
	var b byteBudget
	const limit = 1 << 20
	b.give(limit + limit/2)
	data, held, err := readAll(strings.NewReader(strings.Repeat("x", limit)), limit, &b)
	if err != nil || len(data) != limit {
		t.Fatalf("read %d bytes: %v", len(data), err)
	}
	if held != limit || b.left.Load() != limit/2 {
		t.Fatalf("holds %d, %d left", held, b.left.Load())
	}
	b.give(held)
	var small byteBudget
	small.give(limit + limit/2 - 1) // one byte short of the last growth
	if _, held, err := readAll(strings.NewReader(strings.Repeat("x", limit)), limit, &small); !errors.Is(err, errNoMemory) {
		t.Fatalf("one byte short: %v", err)
	} else {
		small.give(held)
	}
	if small.left.Load() != limit+limit/2-1 {
		t.Fatalf("%d left after giving back, want all", small.left.Load())
	}
}

// A call over the bus takes one of MaxConns too: with every place held by
// socket connections, it is answered rc 20 "busy".
func TestBusCallsShareMaxConns(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{})
	cfg := notes()
	cfg.MaxConns = 2
	path, s := serve(t, cfg)
	node := testclient.Connect(t, e, "desk")
	ctx := ctxT(t, 10*time.Second)
	if err := s.ServeBus(ctx, node, ""); err != nil {
		t.Fatal(err)
	}
	ch := testclient.Connect(t, e, "script").Scope("s").Channel(BusChannel("notes"))
	greet := []byte(`{"command":"greet","args":{"name":"ann"}}`)
	if _, err := ch.Request(ctx, "desk", greet); err != nil {
		t.Fatalf("a bus call with places free: %v", err)
	}
	held, held2 := dialRaw(t, path), dialRaw(t, path)
	defer held2.Close()
	testbroker.Eventually(t, 10*time.Second, "both places taken", func() bool { return len(s.slots) == 2 })
	_, err := ch.Request(ctx, "desk", greet)
	var re *client.RequestError
	if !errors.As(err, &re) || re.RC != 20 || !strings.Contains(re.Text, "busy") {
		t.Fatalf("a bus call past MaxConns: %v", err)
	}
	held.Close()
	testbroker.Eventually(t, 10*time.Second, "a place free", func() bool { return len(s.slots) < 2 })
	if _, err := ch.Request(ctx, "desk", greet); err != nil {
		t.Fatalf("a bus call once a place is free: %v", err)
	}
}
