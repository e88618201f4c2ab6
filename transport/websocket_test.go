package transport

// WebSocket: one frame per binary message over a real HTTP server, the
// frame limit at its edge, text messages, deadlines, the origin check and
// a closed listener.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"busbar/wire"
)

// wsServer serves a WebSocketListener on a loopback HTTP server (TLS when
// cfg is set) and returns it with the endpoint to dial.
func wsServer(t *testing.T, cfg *tls.Config, opts WebSocketOptions) (*WebSocketListener, Endpoint) {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wsl := NewWebSocketListener(tcp.Addr(), opts)
	mux := http.NewServeMux()
	mux.Handle(WebSocketPath, wsl)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	var ln net.Listener = tcp
	e := Endpoint{Scheme: SchemeWS, Address: tcp.Addr().String()}
	if cfg != nil {
		ln, e.Scheme = tls.NewListener(tcp, cfg), SchemeWSS
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = wsl.Close(); _ = srv.Close(); <-done })
	return wsl, e
}

// accepted dials e with transport.Dial and returns both ends.
func accepted(t *testing.T, wsl *WebSocketListener, e Endpoint, cfg *tls.Config) (client, server net.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := acceptNext(wsl)
	client, err := Dial(ctx, e, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if server = <-got; server == nil {
		t.Fatal("the listener closed before it accepted")
	}
	t.Cleanup(func() { closeBoth(client, server) })
	return client, server
}

// acceptNext accepts one connection from wsl in the background; the
// channel gets it (nil if the listener closed first).
func acceptNext(wsl *WebSocketListener) <-chan net.Conn {
	got := make(chan net.Conn, 1)
	go func() {
		c, _ := wsl.Accept()
		got <- c
	}()
	return got
}

// closeBoth closes two ends at once: a WebSocket Close waits for the
// peer's close frame, which an end that is not reading sends only when it
// closes too.
func closeBoth(a, b net.Conn) {
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Close() }()
	_ = b.Close()
	<-done
}

// rawClient dials wsl's server with the WebSocket library itself, to see
// the messages as they travel.
func rawClient(t *testing.T, wsl *WebSocketListener, e Endpoint) (*websocket.Conn, net.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := acceptNext(wsl)
	ws, _, err := websocket.Dial(ctx, "ws://"+e.Address+WebSocketPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	server := <-got
	t.Cleanup(func() { _ = ws.CloseNow(); _ = server.Close() })
	return ws, server
}

func frameBytes(t *testing.T, command string, body string) []byte {
	t.Helper()
	f, err := wire.AppendFrame(nil, wire.New(wire.TypeEvent, command).WithHeader(wire.HeaderID, "1").WithBody([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Frames written to the stream in any split arrive as one binary message
// each, without their prefix; each message arrives behind its prefix.
func TestWebSocketCarriesOneFramePerMessage(t *testing.T) {
	wsl, e := wsServer(t, nil, WebSocketOptions{})
	ws, server := rawClient(t, wsl, e)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	a, b := frameBytes(t, "a", "first"), frameBytes(t, "b", "second\x00\n")
	stream := append(append([]byte{}, a...), b...)
	// Two frames in pieces: inside the prefix, inside a frame, across both.
	for _, cut := range [][]byte{stream[:2], stream[2:10], stream[10 : len(a)+3], stream[len(a)+3:]} {
		if n, err := server.Write(cut); err != nil || n != len(cut) {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	for _, want := range [][]byte{a[4:], b[4:]} {
		typ, got, err := ws.Read(ctx)
		if err != nil || typ != websocket.MessageBinary || !bytes.Equal(got, want) {
			t.Fatalf("message: %v %q %v, want binary %q", typ, got, err, want)
		}
	}

	// The other way: each message is a length-prefixed frame on the stream.
	if err := ws.Write(ctx, websocket.MessageBinary, a[4:]); err != nil {
		t.Fatal(err)
	}
	if err := ws.Write(ctx, websocket.MessageBinary, b[4:]); err != nil {
		t.Fatal(err)
	}
	r := wire.NewReader(server)
	for _, want := range []string{"first", "second\x00\n"} {
		m, err := r.ReadMessage()
		if err != nil || string(m.Body()) != want {
			t.Fatalf("ReadMessage: %v %v, want body %q", m, err, want)
		}
	}
}

// SetFrameLimit at its edge: a message of the limit arrives whole; one
// byte more, or far more, arrives as a length over the limit, which the
// stream reader refuses before reading on.
func TestWebSocketFrameLimitEdge(t *testing.T) {
	wsl, e := wsServer(t, nil, WebSocketOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const limit = 100
	for _, size := range []int{limit, limit + 1, 64 << 10} {
		ws, server := rawClient(t, wsl, e)
		SetFrameLimit(server, limit)
		if err := ws.Write(ctx, websocket.MessageBinary, bytes.Repeat([]byte{'x'}, size)); err != nil {
			t.Fatal(err)
		}
		var prefix [4]byte
		if _, err := io.ReadFull(server, prefix[:]); err != nil {
			t.Fatal(err)
		}
		got := int(binary.BigEndian.Uint32(prefix[:]))
		want := min(size, limit+1)
		if got != want {
			t.Errorf("a %d-byte message under a limit of %d reads as %d bytes, want %d", size, limit, got, want)
		}
		r := wire.NewReader(io.MultiReader(bytes.NewReader(prefix[:]), server))
		r.SetLimit(limit)
		if _, err := r.ReadFrame(); size > limit && !errors.Is(err, wire.ErrTooLarge) {
			t.Errorf("a %d-byte message: the reader says %v, want ErrTooLarge", size, err)
		}
	}
}

// A text message is not a frame: Read fails with ErrTextMessage and the
// peer is told why (1003).
func TestWebSocketRefusesTextMessages(t *testing.T) {
	wsl, e := wsServer(t, nil, WebSocketOptions{})
	ws, server := rawClient(t, wsl, e)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, []byte("---\n---\n")); err != nil {
		t.Fatal(err)
	}
	peer := make(chan error, 1)
	go func() { _, _, err := ws.Read(ctx); peer <- err }() // reading, it answers the close
	if _, err := server.Read(make([]byte, 64)); !errors.Is(err, ErrTextMessage) {
		t.Fatalf("Read after a text message: %v, want ErrTextMessage", err)
	}
	if err := <-peer; websocket.CloseStatus(err) != websocket.StatusUnsupportedData {
		t.Fatalf("the peer read %v, want close status 1003", err)
	}
}

// A read deadline that passes while a Read waits fails it with a timeout
// (net.Error), as on every other transport; one already past fails the
// next Read at once.
func TestWebSocketReadDeadline(t *testing.T) {
	wsl, e := wsServer(t, nil, WebSocketOptions{})
	_, server := accepted(t, wsl, e, nil)
	_ = server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := server.Read(make([]byte, 8))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past its deadline: %v, want a timeout", err)
	}

	_, server = accepted(t, wsl, e, nil)
	_ = server.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := server.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read with a deadline in the past: %v", err)
	}
}

// Over wss the dial verifies the server's certificate, and frames pass.
func TestWebSocketOverTLS(t *testing.T) {
	srvCfg, cliCfg := serverTLS(t)
	wsl, e := wsServer(t, srvCfg, WebSocketOptions{})
	client, server := accepted(t, wsl, e, cliCfg)
	f := frameBytes(t, "x", "over tls")
	if _, err := client.Write(f); err != nil {
		t.Fatal(err)
	}
	m, err := wire.NewReader(server).ReadMessage()
	if err != nil || string(m.Body()) != "over tls" {
		t.Fatalf("%v %v", m, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := Dial(ctx, e, nil); err == nil { // system roots: the test certificate is not among them
		c.Close()
		t.Fatal("wss dial trusted an unknown certificate")
	}
}

// A closed listener's Accept returns net.ErrClosed and an upgrade gets 503.
func TestWebSocketListenerClosed(t *testing.T) {
	wsl, e := wsServer(t, nil, WebSocketOptions{})
	_ = wsl.Close()
	if _, err := wsl.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws://"+e.Address+WebSocketPath, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("upgrade after Close: %v %v, want 503", resp, err)
	}
}

// The origin rules (docs/browser.md#origins), by request.
func TestWebSocketOriginCheck(t *testing.T) {
	wsl := NewWebSocketListener(nil, WebSocketOptions{Origins: []string{"app.example:8443", "https://*.corp.example:*"}})
	tests := []struct {
		origin, host string
		tls, ok      bool
	}{
		{"", "127.0.0.1:7475", false, true},                             // not a browser
		{"http://127.0.0.1:3000", "127.0.0.1:7475", false, true},        // a loopback page
		{"http://localhost:3000", "127.0.0.1:7475", false, true},        // by name
		{"http://[::1]:3000", "[::1]:7475", false, true},                // IPv6
		{"https://127.0.0.2", "localhost:7475", false, true},            // all of 127/8
		{"http://evil.example", "127.0.0.1:7475", false, false},         // a foreign page
		{"http://evil.example:7475", "evil.example:7475", false, false}, // DNS rebinding: same origin over plain HTTP
		{"http://127.0.0.1:3000", "evil.example:7475", false, false},    // a loopback page asking a foreign Host
		{"https://bus.example:8443", "bus.example:8443", true, true},    // its own origin over TLS
		{"https://other.example", "bus.example:8443", true, false},
		{"https://app.example:8443", "bus.example:8443", true, true}, // listed
		{"http://app.example:8443", "127.0.0.1:7475", false, true},   // a host pattern matches any scheme
		{"https://x.corp.example:9", "127.0.0.1:7475", false, true},  // a scheme pattern
		{"http://x.corp.example:9", "127.0.0.1:7475", false, false},  // … only that scheme
		{"null", "127.0.0.1:7475", false, false},                     // a sandboxed or file page
		{"file:///home/me/page.html", "127.0.0.1:7475", false, false},
		{"ws://127.0.0.1:3000", "127.0.0.1:7475", false, false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "http://"+tt.host+WebSocketPath, nil)
		r.Host = tt.host
		if tt.origin != "" {
			r.Header.Set("Origin", tt.origin)
		}
		if tt.tls {
			r.TLS = &tls.ConnectionState{}
		}
		err := wsl.checkOrigin(r)
		if (err == nil) != tt.ok {
			t.Errorf("origin %q to Host %s (tls %v): %v, want allowed=%v", tt.origin, tt.host, tt.tls, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrOriginRefused) {
			t.Errorf("origin %q: %v does not match ErrOriginRefused", tt.origin, err)
		}
	}
}

// A refused origin gets 403 and never reaches Accept.
func TestWebSocketRefusedOriginGets403(t *testing.T) {
	wsl, e := wsServer(t, nil, WebSocketOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{"Origin": {"http://evil.example"}}
	_, resp, err := websocket.Dial(ctx, "ws://"+e.Address+WebSocketPath, &websocket.DialOptions{HTTPHeader: h})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a foreign origin: %v %v, want 403", resp, err)
	}
	h.Set("Origin", "http://localhost:1234")
	got := acceptNext(wsl)
	ws, _, err := websocket.Dial(ctx, "ws://"+e.Address+WebSocketPath, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		t.Fatalf("a loopback origin: %v", err)
	}
	_ = ws.CloseNow()
	c := <-got
	if c == nil || strings.Contains(c.RemoteAddr().String(), "unknown") {
		t.Fatalf("accepted %v", c)
	}
	_ = c.Close()
}

// Listen refuses ws endpoints: WebSocket comes through an HTTP server.
func TestListenRefusesWebSocketEndpoints(t *testing.T) {
	for _, s := range []string{"ws://127.0.0.1:0", "wss://localhost:0"} {
		e, _ := ParseEndpoint(s)
		if ln, err := Listen(e, nil); err == nil || !errors.Is(err, ErrBadEndpoint) {
			if ln != nil {
				ln.Close()
			}
			t.Errorf("Listen(%s): %v, want ErrBadEndpoint", s, err)
		}
	}
}

// TestProtocolDocWebSocketExample keeps docs/protocol.md's WebSocket
// example true: it is exactly the bytes a server connection puts on the
// wire for the stream frame of the stream example, read from a raw TCP
// connection that did the upgrade by hand.
func TestProtocolDocWebSocketExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- websocket-example:")
	if !ok {
		t.Fatal("docs/protocol.md has no WebSocket example")
	}
	_, rest, _ = strings.Cut(rest, "```\n")
	block, _, _ := strings.Cut(rest, "```")

	wsl, e := wsServer(t, nil, WebSocketOptions{})
	got := acceptNext(wsl)
	tcp, err := net.Dial("tcp", e.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	_ = tcp.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET " + WebSocketPath + " HTTP/1.1\r\nHost: " + e.Address + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(tcp, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(tcp)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	server := <-got
	defer func() { _ = tcp.Close(); _ = server.Close() }()
	frame, err := wire.AppendFrame(nil, wire.New(wire.TypeEvent, "chat").WithHeader("id", "7").WithBody([]byte("hi\x00\n")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.Write(frame); err != nil {
		t.Fatal(err)
	}
	wireBytes := make([]byte, 2+len(frame)-4)
	if _, err := io.ReadFull(br, wireBytes); err != nil {
		t.Fatal(err)
	}
	if dump := hex.Dump(wireBytes); dump != block {
		t.Fatalf("docs/protocol.md's WebSocket example is stale; the wire carries:\n%s", dump)
	}
}

// A stream whose prefix claims more than MAX_MESSAGE_BYTES cannot be
// carried: Write refuses it (wire.ErrTooLarge) rather than buffer it.
func TestWebSocketWriteRefusesAnOversizePrefix(t *testing.T) {
	wsl, e := wsServer(t, nil, WebSocketOptions{})
	client, _ := accepted(t, wsl, e, nil)
	var prefix [4]byte
	binary.BigEndian.PutUint32(prefix[:], wire.MaxMessageBytes+1)
	if _, err := client.Write(prefix[:]); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("a prefix of MaxMessageBytes+1: %v, want ErrTooLarge", err)
	}
}

// BenchmarkWebSocketFrames measures one frame's way over a WebSocket on
// loopback: written to the stream at one end, a message on the wire, read
// as a frame at the other.
func BenchmarkWebSocketFrames(b *testing.B) {
	for _, size := range []int{128, 4 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			tcp, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			wsl := NewWebSocketListener(tcp.Addr(), WebSocketOptions{})
			srv := &http.Server{Handler: wsl, ReadHeaderTimeout: 5 * time.Second}
			served := make(chan struct{})
			go func() { defer close(served); _ = srv.Serve(tcp) }()
			defer func() { _ = srv.Close(); <-served }()
			got := acceptNext(wsl)
			client, err := Dial(context.Background(), Endpoint{Scheme: SchemeWS, Address: tcp.Addr().String()}, nil)
			if err != nil {
				b.Fatal(err)
			}
			server := <-got
			defer closeBoth(client, server)
			f, _ := wire.AppendFrame(nil, wire.New(wire.TypeEvent, "bench").WithHeader(wire.HeaderID, "1").WithBody(make([]byte, size)))
			r := wire.NewReader(server)
			done := make(chan error, 1)
			b.ReportAllocs()
			b.SetBytes(int64(len(f)))
			b.ResetTimer()
			go func() {
				for range b.N {
					if _, err := r.ReadFrame(); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for range b.N {
				if _, err := client.Write(f); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// A connection upgraded while nobody calls Accept waits for it; when the
// listener closes instead, it is closed (and its reader ends: TestMain
// checks for leaks).
func TestWebSocketUnacceptedConnectionClosesWithTheListener(t *testing.T) {
	wsl, e := wsServer(t, nil, WebSocketOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+e.Address+WebSocketPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	_ = wsl.Close()
	if _, _, err := ws.Read(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read from a connection nobody accepted: %v, want it closed", err)
	}
}
