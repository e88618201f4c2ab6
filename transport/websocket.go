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
type wsConn struct {
	net.Conn // websocket.NetConn of ws
	ws       *websocket.Conn
	ctx      context.Context // ends at Close: bounds every read

	limit atomic.Int64 // largest frame Read hands on whole

	rmu  sync.Mutex // one Read at a time; guards rbuf, roff
	rbuf []byte     // the current message behind its prefix
	roff int        // how much of rbuf Read has returned
	rdl  readDeadline

	wmu   sync.Mutex // one Write at a time; guards wpart
	wpart []byte     // the start of a frame whose end is still to come
}

// retainReadBytes is the largest read buffer kept between messages, as
// wire.Reader keeps its own: a connection idle after one large frame does
// not pin it.
const retainReadBytes = 64 << 10

func newWSConn(ws *websocket.Conn) *wsConn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &wsConn{Conn: websocket.NetConn(ctx, ws, websocket.MessageBinary), ws: ws, ctx: ctx}
	c.rdl.stop = cancel
	c.limit.Store(wire.MaxMessageBytes)
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

// next reads the next message, behind its length prefix, into rbuf. A
// message over the limit is cut at limit+1 bytes: the prefix then says
// limit+1 and the reader refuses the frame on its length alone.
func (c *wsConn) next() error {
	ctx, err := c.rdl.begin(c.ctx)
	if err != nil {
		return err
	}
	defer c.rdl.end()
	typ, r, err := c.ws.Reader(ctx)
	if err != nil {
		return c.readError(ctx, err)
	}
	if typ != websocket.MessageBinary {
		_ = c.ws.Close(websocket.StatusUnsupportedData, "busbar frames travel in binary messages")
		return ErrTextMessage
	}
	buf := c.rbuf[:0]
	if cap(buf) > retainReadBytes || cap(buf) < webSocketPrefix {
		buf = make([]byte, 0, 512)
	}
	buf = append(buf, 0, 0, 0, 0)
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
			return c.readError(ctx, err)
		}
	}
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-webSocketPrefix))
	c.rbuf, c.roff = buf, 0
	return nil
}

// readError turns what the WebSocket library says into what a stream
// says: a normal close is io.EOF, a deadline os.ErrDeadlineExceeded.
func (c *wsConn) readError(ctx context.Context, err error) error {
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway:
		return io.EOF
	}
	if ctx.Err() != nil && c.ctx.Err() == nil {
		return fmt.Errorf("transport: websocket read: %w", os.ErrDeadlineExceeded)
	}
	return err
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

// SetReadDeadline sets the deadline of Read; one that passes while a Read
// waits closes the connection, as websocket.NetConn does (a WebSocket read
// cannot be interrupted and resumed).
func (c *wsConn) SetReadDeadline(t time.Time) error {
	c.rdl.set(t)
	return nil
}

func (c *wsConn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *wsConn) Close() error {
	c.rdl.close()
	return c.Conn.Close()
}

// readDeadline is a read deadline for a read that waits on a context: when
// it passes, it cancels the read in progress, or fails the next one.
type readDeadline struct {
	mu      sync.Mutex
	timer   *time.Timer
	gen     uint64             // bumped by each set: a timer of an older one does nothing
	expired bool               // the deadline passed: reads fail until it is set again
	cancel  context.CancelFunc // the read in progress, if any
	stop    context.CancelFunc // ends the connection's context (Close)
}

func (d *readDeadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.expired = false
	if t.IsZero() {
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		d.expireLocked()
		return
	}
	gen := d.gen
	d.timer = time.AfterFunc(wait, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gen == gen {
			d.expireLocked()
		}
	})
}

func (d *readDeadline) expireLocked() {
	d.expired = true
	if d.cancel != nil {
		d.cancel()
	}
}

func (d *readDeadline) begin(parent context.Context) (context.Context, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.expired {
		return nil, fmt.Errorf("transport: websocket read: %w", os.ErrDeadlineExceeded)
	}
	ctx, cancel := context.WithCancel(parent)
	d.cancel = cancel
	return ctx, nil
}

func (d *readDeadline) end() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cancel()
	d.cancel = nil
}

func (d *readDeadline) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
	}
	d.stop()
}
