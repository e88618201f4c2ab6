package wire

import "io"

// readBuffer is a Reader's buffer: bufio.Reader's job, with a size that
// follows the traffic. It starts at readBufferSize, so a connection that
// is logging in or idle holds little, and doubles up to maxReadBuffer
// while reads fill it (the peer sends faster than it is read), so a busy
// connection takes more frames per read system call: at 16 KiB a frame,
// a 32 KiB buffer reads about one frame per call. Once shrinkAfter reads
// in a row have each brought less than shortRead, the buffer goes back to
// readBufferSize as soon as what it holds fits that. nats-server sizes
// its read buffers the same way. A Reader whose frame limit is at most
// readBufferSize (a broker's before login) never grows its buffer: what
// an unauthenticated peer can make the broker hold stays bounded.
type readBuffer struct {
	rd    io.Reader
	most  int // the size it may grow to: maxReadBuffer or readBufferSize
	buf   []byte
	r, w  int   // unread bytes are buf[r:w]
	err   error // the underlying reader's, returned once the bytes before it are read
	short int   // reads in a row that brought less than shortRead
}

// The read buffer's sizes (see readBuffer).
const (
	maxReadBuffer = 64 << 10
	shrinkAfter   = 64
	shortRead     = readBufferSize / 4
)

func newReadBuffer(rd io.Reader) *readBuffer {
	return &readBuffer{rd: rd, most: maxReadBuffer, buf: make([]byte, readBufferSize)}
}

// Buffered is how many bytes can be read without a read of the peer.
func (b *readBuffer) Buffered() int { return b.w - b.r }

// fill reads once into the free end of the buffer, first moving the
// unread bytes to its start, and then grows or shrinks it.
func (b *readBuffer) fill() {
	if b.r > 0 {
		copy(b.buf, b.buf[b.r:b.w])
		b.w -= b.r
		b.r = 0
	}
	free := len(b.buf) - b.w
	for range 100 { // as bufio: a reader that returns nothing for ever is broken
		n, err := b.rd.Read(b.buf[b.w:])
		if n < 0 || n > free {
			panic("wire: reader returned an impossible count")
		}
		b.w += n
		if err != nil {
			b.err = err
			return
		}
		if n > 0 {
			b.resize(n, n == free)
			return
		}
	}
	b.err = io.ErrNoProgress
}

// resize grows the buffer after a read of n bytes that filled it, and
// shrinks it after a run of short reads, once what it holds fits the
// smaller size.
func (b *readBuffer) resize(n int, filled bool) {
	switch {
	case filled:
		b.short = 0
		if len(b.buf) < b.most {
			b.grow(min(2*len(b.buf), b.most))
		}
	case n < shortRead:
		if b.short < shrinkAfter {
			b.short++
		}
		if b.short == shrinkAfter && len(b.buf) > readBufferSize && b.w-b.r <= readBufferSize {
			b.short = 0
			b.grow(readBufferSize) // a fresh, smaller array: the large one is let go
		}
	default:
		b.short = 0
	}
}

// grow moves the unread bytes into a buffer of size bytes (at least them).
func (b *readBuffer) grow(size int) {
	nb := make([]byte, max(size, b.w-b.r))
	b.w = copy(nb, b.buf[b.r:b.w])
	b.r = 0
	b.buf = nb
}

// readErr returns the pending error and clears it.
func (b *readBuffer) readErr() error {
	err := b.err
	b.err = nil
	return err
}

// Peek returns the next n bytes without consuming them; they stay valid
// until the next call. A buffer smaller than n grows to it first when n
// is at most the size it may grow to; past that, Peek returns what it
// has and io.ErrShortBuffer.
func (b *readBuffer) Peek(n int) ([]byte, error) {
	if n > len(b.buf) && n <= b.most {
		b.grow(n)
	}
	for b.w-b.r < n && b.w-b.r < len(b.buf) && b.err == nil {
		b.fill()
	}
	if avail := b.w - b.r; avail < n {
		err := b.readErr()
		if err == nil {
			err = io.ErrShortBuffer
		}
		return b.buf[b.r:b.w], err
	}
	return b.buf[b.r : b.r+n], nil
}

// Discard skips the next n bytes, reading them when they are not
// buffered; it returns how many it skipped.
func (b *readBuffer) Discard(n int) (int, error) {
	skipped := 0
	for {
		k := min(n-skipped, b.w-b.r)
		b.r += k
		if skipped += k; skipped == n {
			return n, nil
		}
		if b.err != nil {
			return skipped, b.readErr()
		}
		b.fill()
	}
}

// Read reads into p as bufio.Reader does: buffered bytes first; with
// none, a p as large as the buffer is read into directly.
func (b *readBuffer) Read(p []byte) (int, error) {
	if len(p) == 0 {
		if b.w > b.r {
			return 0, nil
		}
		return 0, b.readErr()
	}
	if b.r == b.w {
		if b.err != nil {
			return 0, b.readErr()
		}
		if len(p) >= len(b.buf) {
			n, err := b.rd.Read(p)
			if n < 0 {
				panic("wire: reader returned a negative count")
			}
			return n, err
		}
		b.fill()
		if b.r == b.w {
			return 0, b.readErr()
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}
