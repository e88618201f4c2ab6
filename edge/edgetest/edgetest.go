// Package edgetest is what the doors' tests share: a listener that fails
// as a process out of file descriptors does, and a log sink that several
// goroutines write and a test reads.
package edgetest

import (
	"bytes"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// EMFILE wraps a real listener: its first n Accepts fail with "too many
// open files" (accept4: EMFILE, as the kernel reports it), the ones after
// accept from the listener.
func EMFILE(ln net.Listener, n int) net.Listener {
	l := &emfile{Listener: ln}
	l.fail.Store(int32(n))
	return l
}

type emfile struct {
	net.Listener
	fail atomic.Int32
}

func (l *emfile) Accept() (net.Conn, error) {
	if l.fail.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: l.Addr().Network(), Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// LogBuffer is a log's output, written by several goroutines and read by
// the test.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Bytes is a copy of what was written so far.
func (l *LogBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}
