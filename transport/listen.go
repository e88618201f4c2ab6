package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// ErrAddressInUse is wrapped by Listen's error when something already
// listens on the endpoint.
var ErrAddressInUse = errors.New("transport: address in use")

// staleProbeTimeout bounds the dial that decides whether an existing socket
// is live. A live broker accepts at kernel level at once; only a wedged
// listener with a full backlog takes long, and that one is live too.
const staleProbeTimeout = time.Second

// Listen listens on e. tlsConfig is used only for tls endpoints, where it is
// required and must hold a certificate. See the package documentation for
// the unix socket rules.
//
// A tls listener's Accept does not handshake: the handshake runs on the
// connection's first Read or Write. Serve each connection in its own
// goroutine with a deadline, so a client that stalls mid-handshake cannot
// hold up the accept loop.
func Listen(e Endpoint, tlsConfig *tls.Config) (net.Listener, error) {
	e, err := ParseEndpoint(e.String())
	if err != nil {
		return nil, err
	}
	switch e.Scheme {
	case SchemeUnix:
		return listenUnix(e.Address)
	case SchemeWS, SchemeWSS:
		return nil, fmt.Errorf("%w %s: WebSocket connections come through an HTTP server: mount a WebSocketListener at %s", ErrBadEndpoint, e, WebSocketPath)
	case SchemeTLS:
		cfg, err := serverTLSConfig(tlsConfig)
		if err != nil {
			return nil, err
		}
		ln, err := listenTCP(e)
		if err != nil {
			return nil, err
		}
		return tls.NewListener(ln, cfg), nil
	default: // SchemeTCP; ParseEndpoint admits nothing else.
		return listenTCP(e)
	}
}

func listenTCP(e Endpoint) (net.Listener, error) {
	ln, err := net.Listen("tcp", e.Address)
	if err != nil {
		return nil, listenError(e, err)
	}
	return ln, nil
}

// listenError wraps err, adding ErrAddressInUse when the kernel said so, so
// callers can tell "another broker runs" from other failures.
func listenError(e Endpoint, err error) error {
	if isAddrInUse(err) {
		return fmt.Errorf("transport: listen %s: %w: %w", e, ErrAddressInUse, err)
	}
	return fmt.Errorf("transport: listen %s: %w", e, err)
}

func listenUnix(path string) (net.Listener, error) {
	e := Endpoint{Scheme: SchemeUnix, Address: path}
	if err := clearStaleSocket(path); err != nil {
		return nil, listenError(e, err)
	}
	ln, err := bindUnix(path)
	if err != nil {
		return nil, listenError(e, err)
	}
	// Idempotent on Linux, where bindUnix already created the file 0600; on
	// other systems this closes the window, which the 0700 parent directory
	// covers meanwhile. (On Windows the socket keeps the directory's ACL.)
	if err := restrictSocket(path); err != nil {
		ln.Close()
		return nil, listenError(e, err)
	}
	// net sets this for sockets it created, but say so: the next Listen
	// must not find our socket and mistake it for a live broker's.
	ln.SetUnlinkOnClose(true)
	return unixListener{ln}, nil
}

// UnixSendBuffer is the send buffer (SO_SNDBUF) asked for on both ends of
// a unix socket connection. A unix stream socket's sender may have only
// its send buffer's worth of bytes unread by the peer, and the kernel's
// default (net.core.wmem_default, 208 KiB on most systems) makes a writer
// at full speed sleep and wake far more often than over loopback TCP,
// whose buffers grow to megabytes. The kernel caps the request at
// net.core.wmem_max; asking for more is not an error.
const UnixSendBuffer = 1 << 20

// unixListener sets UnixSendBuffer on the connections it accepts (they do
// not inherit the listener's).
type unixListener struct{ *net.UnixListener }

func (l unixListener) Accept() (net.Conn, error) {
	c, err := l.AcceptUnix()
	if err != nil {
		return nil, err
	}
	_ = c.SetWriteBuffer(UnixSendBuffer)
	return c, nil
}

// bindUnix binds a unix socket at path. The socket inode is chmodded before
// bind (chmodSocket): Linux creates the file with the socket inode's mode
// (minus umask), so the file is never more open than 0600, without
// touching the process-wide umask. Other systems may ignore or refuse
// this; listenUnix restricts the file afterwards regardless.
func bindUnix(path string) (*net.UnixListener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(chmodSocket)
	}}
	ln, err := lc.Listen(context.Background(), "unix", path)
	if err != nil {
		return nil, err
	}
	return ln.(*net.UnixListener), nil
}

// clearStaleSocket makes way for a new socket at path: nothing there is
// fine; a socket nobody answers on (left by a crash) is removed; a live
// socket is ErrAddressInUse; anything else is refused and left alone.
func clearStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket, not touching it: %w", path, fs.ErrExist)
	}
	c, err := net.DialTimeout("unix", path, staleProbeTimeout)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: a live socket is at %s", ErrAddressInUse, path)
	}
	if !IsConnRefused(err) {
		// E.g. EACCES: someone else's socket; not ours to remove.
		return fmt.Errorf("probing existing socket: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale socket: %w", err)
	}
	return nil
}
