package broker_test

// The broker's limits and handshake over WebSocket, the same as over a
// byte stream: the frame limits at their edge (which the WebSocket must
// enforce on whole messages), the handshake timeout, a text message.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// wsRaw dials e (a ws broker) with the WebSocket library and returns the
// connection after reading bus.info: a peer that writes messages by hand.
func wsRaw(t *testing.T, e *testbroker.Env) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.Dial(ctxT(t, 10*time.Second), e.Endpoint+"/bus", nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(-1)
	t.Cleanup(func() { _ = ws.CloseNow() })
	if m := wsRead(t, ws); m.Value(wire.HeaderCommand) != wire.CmdInfo {
		t.Fatalf("first message: %v", m)
	}
	return ws
}

func wsRead(t *testing.T, ws *websocket.Conn) *wire.Message {
	t.Helper()
	m, err := wsReadErr(t, ws)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func wsReadErr(t *testing.T, ws *websocket.Conn) (*wire.Message, error) {
	t.Helper()
	typ, b, err := ws.Read(ctxT(t, 10*time.Second))
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageBinary {
		t.Fatalf("a %v message from the broker", typ)
	}
	return wire.ParseStrict(b)
}

// wsSend sends one frame, without its stream prefix, as one message.
func wsSend(t *testing.T, ws *websocket.Conn, f []byte) {
	t.Helper()
	if err := ws.Write(ctxT(t, 10*time.Second), websocket.MessageBinary, f); err != nil {
		t.Fatal(err)
	}
}

// wsClosed waits for the broker to close ws.
func wsClosed(t *testing.T, ws *websocket.Conn) {
	t.Helper()
	for {
		if _, err := wsReadErr(t, ws); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal("the broker did not close the connection")
			}
			return
		}
	}
}

// Before login, a hello of MaxHelloBytes is read and answered; one byte
// more is TOO_LARGE, naming the limit, and the connection closes.
func TestWebSocketHelloLimitEdge(t *testing.T) {
	e := testbroker.Start(t, "ws", testOpts())
	ws := wsRaw(t, e)
	wsSend(t, ws, helloOfSize(t, broker.MaxHelloBytes)[4:])
	if m := wsRead(t, ws); m.Value(wire.HeaderCommand) != wire.CmdHello || m.Value(wire.HeaderResult) != string(wire.ResultAuth) {
		t.Fatalf("a hello at the limit: %v (want it read, and refused for its credential)", m)
	}
	// Before login the broker drops a WebSocket without a close handshake,
	// before reading the message: a peer still sending may see its
	// connection reset instead of the TOO_LARGE frame, never anything else.
	for _, size := range []int{broker.MaxHelloBytes + 1, 1 << 20} {
		ws := wsRaw(t, e)
		if err := ws.Write(ctxT(t, 10*time.Second), websocket.MessageBinary, bytes.Repeat([]byte{'x'}, size)); err != nil {
			continue // reset while sending
		}
		m, err := wsReadErr(t, ws)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a %d-byte message before login: the connection stayed open", size)
			}
			continue // reset
		}
		if m.Value(wire.HeaderCommand) != wire.CmdError || m.Value(wire.HeaderResult) != string(wire.ResultTooLarge) ||
			!strings.Contains(m.Value(wire.HeaderError), "8192") {
			t.Fatalf("a %d-byte message before login: %v", size, m)
		}
		wsClosed(t, ws)
	}
}

// After login the limit is the payload limit plus MaxFrameOverhead: a
// frame of exactly that is routed (here: refused for its payload, which
// needs the frame read), one byte more closes the connection, TOO_LARGE.
func TestWebSocketFrameLimitEdgeAfterLogin(t *testing.T) {
	opts := testOpts()
	opts.MaxPayload = 4 << 10
	e := testbroker.Start(t, "ws", opts)
	limit := opts.MaxPayload + broker.MaxFrameOverhead
	frame := func(size int) []byte {
		m := wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderID, "big").WithHeader(wire.HeaderTo, "nobody")
		base, _ := wire.AppendFrame(nil, m)
		m.SetBody(bytes.Repeat([]byte{'b'}, size-(len(base)-4)))
		f, err := wire.AppendFrame(nil, m)
		if err != nil || len(f)-4 != size {
			t.Fatalf("built %d bytes, want %d: %v", len(f)-4, size, err)
		}
		return f[4:]
	}
	hello := func() *websocket.Conn {
		ws := wsRaw(t, e)
		body, _ := json.Marshal(wire.Hello{Node: "raw", Principal: "local", Secret: e.Secrets["local"]})
		f, _ := wire.AppendFrame(nil, wire.New(wire.TypeRequest, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion).
			WithHeader(wire.HeaderID, "h").WithBody(body))
		wsSend(t, ws, f[4:])
		if m := wsRead(t, ws); wire.ResponseRC(m).IsError() {
			t.Fatalf("hello: %v", m)
		}
		return ws
	}
	ws := hello()
	wsSend(t, ws, frame(limit))
	if m := wsRead(t, ws); m.Value(wire.HeaderReplyTo) != "big" || m.Value(wire.HeaderResult) != string(wire.Rejected) {
		t.Fatalf("a frame of the limit: %v (want it read and refused for its payload)", m)
	}
	ws = hello()
	wsSend(t, ws, frame(limit+1))
	if m := wsRead(t, ws); m.Value(wire.HeaderCommand) != wire.CmdError || m.Value(wire.HeaderResult) != string(wire.ResultTooLarge) {
		t.Fatalf("a frame one byte over the limit: %v", m)
	}
	wsClosed(t, ws)
}

// A peer that says nothing is closed at HandshakeTimeout, told TIMEOUT.
func TestWebSocketHandshakeTimeout(t *testing.T) {
	opts := testOpts()
	opts.HandshakeTimeout = 200 * time.Millisecond
	e := testbroker.Start(t, "ws", opts)
	ws := wsRaw(t, e)
	if m := wsRead(t, ws); m.Value(wire.HeaderCommand) != wire.CmdError || m.Value(wire.HeaderResult) != string(wire.ResultTimeout) {
		t.Fatalf("a silent peer was told %v", m)
	}
	wsClosed(t, ws)
}

// A text message is not a frame: the connection closes with 1003.
func TestWebSocketTextMessageClosesTheConnection(t *testing.T) {
	e := testbroker.Start(t, "ws", testOpts())
	ws := wsRaw(t, e)
	if err := ws.Write(ctxT(t, 5*time.Second), websocket.MessageText, []byte("---\n---\n")); err != nil {
		t.Fatal(err)
	}
	_, err := wsReadErr(t, ws)
	if websocket.CloseStatus(err) != websocket.StatusUnsupportedData && !errors.Is(err, io.EOF) {
		t.Fatalf("after a text message: %v, want close 1003", err)
	}
}

// A WebSocket node is a network peer with its real address: the directory
// shows it, and the login pools count it under its host.
func TestWebSocketPeerHasItsNetworkAddress(t *testing.T) {
	e := testbroker.Start(t, "ws", testOpts())
	connect(t, e, "alpha")
	nodes := e.Broker.Directory()
	if len(nodes) != 1 || !strings.HasPrefix(nodes[0].Remote, "127.0.0.1:") {
		t.Fatalf("directory: %+v", nodes)
	}
}
