package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"busbar/wire"
)

// WebSocketPath is where a broker's HTTP listener takes WebSocket
// connections: ws://host:port/bus, wss://host:port/bus.
const WebSocketPath = "/bus"

// webSocketPrefix is the stream length prefix a WebSocket connection adds
// to (and strips from) each frame: the broker and client read and write the
// same length-prefixed stream whatever the transport.
const webSocketPrefix = 4

// ErrTextMessage is returned by a WebSocket connection's Read when the peer
// sent a text message: busbar frames travel in binary messages only (the
// body is bytes). The connection is closed with status 1003.
var ErrTextMessage = errors.New("transport: websocket text message; busbar frames travel in binary messages")

// FrameLimiter is implemented by connections that carry one frame per
// transport message (WebSocket). Such a connection must hold a whole
// message before the stream reader above it sees the frame's length, so
// whoever enforces a frame limit tells the connection too: it then reads at
// most n+1 bytes of a message and reports the length as over the limit,
// which the reader refuses before reading on.
type FrameLimiter interface {
	SetFrameLimit(n int)
}

// Establisher is implemented by connections whose Close is kept short
// until their peer is known (WebSocket: no close handshake before then).
type Establisher interface {
	Established()
}

// Established tells nc that its peer is known (it logged in), if nc needs
// to know (Establisher).
func Established(nc net.Conn) {
	if e, ok := nc.(Establisher); ok {
		e.Established()
	}
}

// SetFrameLimit tells nc the largest frame its reader accepts, if nc needs
// to know (FrameLimiter); on a byte stream it does nothing.
func SetFrameLimit(nc net.Conn, n int) {
	if fl, ok := nc.(FrameLimiter); ok {
		fl.SetFrameLimit(n)
	}
}

// wsConn presents a WebSocket connection, one busbar frame per binary
// message, as the length-prefixed byte stream every other transport
// carries: Read adds the 4-byte prefix to each message, Write strips it and
// sends each frame as one message. Writes, the write deadline, Close and
// the addresses are websocket.NetConn's.
//
// Reads go through a goroutine of the connection's own (reader), asked for
// one message at a time: a WebSocket read cannot be interrupted without
// closing the connection, so a read deadline that passes leaves the
// reader waiting and the connection usable (the broker still writes its
// TIMEOUT), and a message is read only once Read wants it, under the frame
// limit in force then.
type wsConn struct {
	net.Conn // websocket.NetConn of ws
	ws       *websocket.Conn
	ctx      context.Context // ends at Close
	cancel   context.CancelFunc
	loop     sync.WaitGroup // the reader

	limit atomic.Int64 // largest frame Read hands on whole

	want  chan struct{}  // Read asks the reader for a message (1 slot)
	got   chan wsMessage // the reader's answer
	rdl   deadline       // the read deadline
	rmu   sync.Mutex     // one Read at a time; guards the fields below
	rbuf  []byte         // the current message behind its prefix
	roff  int            // how much of rbuf Read has returned
	rerr  error          // sticky: the reader has ended
	asked bool           // a message is asked for and not yet taken

	wmu   sync.Mutex // one Write at a time; guards wpart
	wpart []byte     // the start of a frame whose end is still to come

	// established: the peer is known (it logged in, or this end dialled
	// it), so Close runs the close handshake; until then Close drops the
	// connection at once (Established).
	established atomic.Bool
}

type wsMessage struct {
	b   []byte // prefix and frame
	err error
}

func newWSConn(ws *websocket.Conn) *wsConn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &wsConn{Conn: websocket.NetConn(ctx, ws, websocket.MessageBinary), ws: ws, ctx: ctx, cancel: cancel,
		want: make(chan struct{}, 1), got: make(chan wsMessage)}
	c.rdl.init()
	c.limit.Store(wire.MaxMessageBytes)
	c.loop.Add(1)
	go c.reader()
	return c
}

// SetFrameLimit lowers the largest frame Read hands on whole; n ≤ 0 or
// over wire.MaxMessageBytes means wire.MaxMessageBytes.
func (c *wsConn) SetFrameLimit(n int) {
	if n <= 0 || n > wire.MaxMessageBytes {
		n = wire.MaxMessageBytes
	}
	c.limit.Store(int64(n))
}

// reader reads one message each time Read asks, until an error or Close.
func (c *wsConn) reader() {
	defer c.loop.Done()
	for {
		select {
		case <-c.want:
		case <-c.ctx.Done():
			return
		}
		b, err := c.readMessage()
		select {
		case c.got <- wsMessage{b, err}:
		case <-c.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (c *wsConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.roff == len(c.rbuf) {
		if err := c.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.rbuf[c.roff:])
	c.roff += n
	return n, nil
}

// next takes the next message from the reader, asking for it unless an
// earlier Read already did and timed out.
func (c *wsConn) next() error {
	if c.rerr != nil {
		return c.rerr
	}
	if !c.asked {
		c.want <- struct{}{} // never blocks: one slot, one request at a time
		c.asked = true
	}
	select {
	case m := <-c.got:
		c.asked = false
		if m.err != nil {
			c.rerr = m.err
			return m.err
		}
		c.rbuf, c.roff = m.b, 0
		return nil
	case <-c.rdl.wait():
		return fmt.Errorf("transport: websocket read: %w", os.ErrDeadlineExceeded)
	case <-c.ctx.Done():
		return net.ErrClosed
	}
}

// readMessage reads the next message, behind its length prefix. A message
// over the limit is cut at limit+1 bytes: the prefix then says limit+1 and
// the stream reader refuses the frame on its length alone.
func (c *wsConn) readMessage() ([]byte, error) {
	typ, r, err := c.ws.Reader(c.ctx)
	if err != nil {
		switch websocket.CloseStatus(err) {
		case websocket.StatusNormalClosure, websocket.StatusGoingAway:
			return nil, io.EOF
		}
		return nil, err
	}
	if typ != websocket.MessageBinary {
		_ = c.ws.Close(websocket.StatusUnsupportedData, "busbar frames travel in binary messages")
		return nil, ErrTextMessage
	}
	buf := make([]byte, webSocketPrefix, 512)
	max := webSocketPrefix + int(c.limit.Load()) + 1
	for len(buf) < max {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow as bytes arrive, never to what the peer claims
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), max)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-webSocketPrefix))
	return buf, nil
}

// Write sends every complete frame in p as one binary message, without its
// length prefix, and keeps the start of an incomplete one for the next
// Write (a writer may flush a frame in pieces).
func (c *wsConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	data := p
	if len(c.wpart) > 0 {
		c.wpart = append(c.wpart, p...)
		data = c.wpart
	}
	for len(data) >= webSocketPrefix {
		n := binary.BigEndian.Uint32(data)
		if n > wire.MaxMessageBytes {
			return 0, fmt.Errorf("transport: websocket write: a frame of %d bytes is over the limit of %d: %w", n, wire.MaxMessageBytes, wire.ErrTooLarge)
		}
		end := webSocketPrefix + int(n)
		if len(data) < end {
			break
		}
		if _, err := c.Conn.Write(data[webSocketPrefix:end]); err != nil {
			return 0, err
		}
		data = data[end:]
	}
	c.wpart = append(c.wpart[:0], data...)
	return len(p), nil
}

// SetReadDeadline sets the deadline of Read. Unlike websocket.NetConn's,
// one that passes leaves the connection open: the message asked for is
// handed to the next Read.
func (c *wsConn) SetReadDeadline(t time.Time) error {
	c.rdl.set(t)
	return nil
}

func (c *wsConn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	return c.Conn.SetWriteDeadline(t)
}

// Established marks the connection as one with a known peer: from then
// on Close runs the close handshake.
func (c *wsConn) Established() { c.established.Store(true) }

// Close closes the WebSocket, then ends and waits for the reader. Once
// established it runs a close handshake (the peer has up to the library's
// 5 s to answer); before, the connection is dropped at once, so a peer
// that never logged in cannot make the broker hold it for that handshake.
func (c *wsConn) Close() error {
	if !c.established.Load() {
		err := c.ws.CloseNow()
		c.cancel()
		c.loop.Wait()
		c.rdl.set(time.Time{})
		return err
	}
	err := c.Conn.Close()
	c.cancel()
	c.loop.Wait()
	c.rdl.set(time.Time{})
	return err
}

// abort closes the connection at once, without a close handshake: for one
// nobody took.
func (c *wsConn) abort() {
	_ = c.ws.CloseNow()
	c.cancel()
	c.loop.Wait()
}

// deadline is a deadline as a channel, closed when it passes (the shape of
// the standard library's net.Pipe deadlines).
type deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	passed chan struct{} // closed when the deadline passes; replaced when reset
}

func (d *deadline) init() { d.passed = make(chan struct{}) }

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.passed // the timer fired: wait until it closed passed
	}
	d.timer = nil
	closed := isClosed(d.passed)
	if t.IsZero() {
		if closed {
			d.passed = make(chan struct{})
		}
		return
	}
	if wait := time.Until(t); wait > 0 {
		if closed {
			d.passed = make(chan struct{})
		}
		passed := d.passed
		d.timer = time.AfterFunc(wait, func() { close(passed) })
		return
	}
	if !closed {
		close(d.passed)
	}
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.passed
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
