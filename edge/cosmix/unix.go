package cosmix

// The native Unix ingress: cosmix-lib-client's connect_unix. The client
// checks the socket's path (every directory the broker's or root's, none
// group- or world-writable but a sticky root one above the socket's own),
// that the socket's peer credentials are its configured broker account,
// then upgrades ws://localhost/ws over the stream and calls noded.ping,
// refusing a broker whose extensions lack "native-session": "1" (its
// UnsupportedVersion). After that it is the WebSocket protocol of the
// loopback listener, with two rules of the verified profile: a binary
// message ends the connection, and a broker_principal header the client
// receives is believed, so busbar passes none on and stamps one only
// where it knows the sender (vouch.go).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"busbar/transport"
	"busbar/wire"
)

// NativeSessionVersion is the native-session profile busbar speaks on the
// Unix socket: noded.ping's "native-session" extension, on both
// transports while the socket is served.
const NativeSessionVersion = "1"

// PrincipalHeader is the header in which noded stamps the sender's
// kernel-verified principal on a delivery to a verified Unix client.
// busbar removes every spelling of it from what it forwards, so no peer
// can put one in front of a client that would believe it, and stamps it
// only on what one native connection sends another (vouch.go).
const PrincipalHeader = "broker_principal"

// Errors of the Unix ingress.
var (
	// ErrUnixUnsupported: this system gives busbar no peer credentials of
	// a Unix socket connection, so it cannot serve the native ingress.
	ErrUnixUnsupported = errors.New("cosmix: the native Unix ingress needs peer credentials of Unix sockets, which busbar reads on Linux, macOS and FreeBSD only")
	// ErrUnsafeSocketPath: the socket's path is not one only the broker's
	// user (or root) controls; cosmix-lib-client would refuse it too.
	ErrUnsafeSocketPath = errors.New("cosmix: unsafe socket path")
	// ErrForeignPeer: a connection on the Unix socket came from another
	// OS user than the broker's.
	ErrForeignPeer = errors.New("cosmix: a peer of another OS user")
)

// PeerCred is what the kernel says of a Unix socket connection's peer
// (SO_PEERCRED and its equivalents), read once at accept. PID is 0 where
// the system does not tell it.
type PeerCred struct {
	UID, GID uint32
	PID      int32
}

// CheckPeer admits a peer only when it runs as owner, the broker's own
// OS user: busbar opens nothing to another user, even one the socket's
// mode would let in (root's connections included).
func CheckPeer(c PeerCred, owner int) error {
	if owner < 0 || int64(c.UID) != int64(owner) {
		return fmt.Errorf("%w: uid %d (pid %d), the broker runs as uid %d", ErrForeignPeer, c.UID, c.PID, owner)
	}
	return nil
}

// UnixListener is the native ingress's socket: it hands on only the
// connections of the broker's own user, each with its peer credentials.
// ServeUnix serves it behind the edge's accept loop (edge.HTTPServer, so
// edge.Listener retries its temporary failures).
type UnixListener struct {
	ln     net.Listener
	path   string
	owner  int
	refuse func(PeerCred, error) // logs and counts a refused peer

	once sync.Once // Close
	err  error
}

// Accept returns the next connection of the broker's own user; another
// user's is closed at once, before a byte is read, and refused
// (RefusedForeignPeer). An error of the socket is returned as it is.
func (l *UnixListener) Accept() (net.Conn, error) {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return nil, err
		}
		if pc := l.admit(c); pc != nil {
			return pc, nil
		}
	}
}

// admit is c with its peer credentials when its peer is the broker's own
// user; else it closes c, refuses it, and returns nil.
func (l *UnixListener) admit(c net.Conn) net.Conn {
	cred, err := peerCred(c)
	if err == nil {
		err = CheckPeer(cred, l.owner)
	}
	if err != nil {
		_ = c.Close()
		l.refuse(cred, err)
		return nil
	}
	return &peerConn{Conn: c, cred: cred}
}

// Close closes the socket and removes its file; it may be called more
// than once.
func (l *UnixListener) Close() error {
	l.once.Do(func() { l.err = l.ln.Close() })
	return l.err
}

// Addr is the socket's address.
func (l *UnixListener) Addr() net.Addr { return l.ln.Addr() }

// Path is the socket's path, the endpoint noded.ping advertises.
func (l *UnixListener) Path() string { return l.path }

// peerConn is a connection accepted on the Unix socket, with its peer.
// Its RemoteAddr carries the credentials through what wraps it (the
// edge's admission), to ServeUnix's ConnContext.
type peerConn struct {
	net.Conn
	cred PeerCred
}

func (c *peerConn) RemoteAddr() net.Addr {
	var s string
	if a := c.Conn.RemoteAddr(); a != nil {
		s = a.String()
	}
	return &peerAddr{s: s, cred: c.cred}
}

// peerAddr is a Unix socket peer's address and credentials.
type peerAddr struct {
	s    string
	cred PeerCred
}

func (a *peerAddr) Network() string { return "unix" }
func (a *peerAddr) String() string  { return a.s }

type peerKey struct{}

// peerOf is the peer credentials of a request that came over the Unix
// socket.
func peerOf(r *http.Request) (PeerCred, bool) {
	c, ok := r.Context().Value(peerKey{}).(PeerCred)
	return c, ok
}

// ListenUnix opens the native ingress's socket at path (mode 0600, a
// stale socket replaced, a live one refused) and makes noded.ping
// advertise it from now on, on both transports; ServeUnix serves it.
// path must be absolute and clean, and each directory above it the
// broker user's or root's and writable by nobody else (a sticky root
// directory such as /tmp may be above the socket's own directory, not
// be it), the rule cosmix-lib-client checks before it connects. Config.Owner
// is required: a connection on the socket logs in as the owner.
func (s *Server) ListenUnix(path string) (*UnixListener, error) {
	if !unixSupported {
		return nil, ErrUnixUnsupported
	}
	if s.cfg.Owner.Principal == "" {
		return nil, errors.New("cosmix: the Unix socket needs Config.Owner, the credential its connections log in with")
	}
	owner := os.Geteuid()
	if err := checkSocketPath(path, owner); err != nil {
		return nil, err
	}
	ln, err := transport.Listen(transport.Endpoint{Scheme: transport.SchemeUnix, Address: path}, nil)
	if err != nil {
		return nil, err
	}
	ul := &UnixListener{ln: ln, path: path, owner: owner, refuse: func(c PeerCred, err error) {
		s.refuse(DoorUnix, RefusedForeignPeer, "", "path", path, "uid", c.UID, "pid", c.PID, "err", err)
	}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = ln.Close()
		return nil, ErrServerClosed
	}
	s.endpoint = path
	s.unixLns = append(s.unixLns, ul)
	return ul, nil
}

// ServeUnix answers cosmix clients on the socket of ListenUnix until
// Close, as Serve does (the edge's HTTP server and admission). Each
// connection is a node of Config.Owner's principal; it sends no token.
func (s *Server) ServeUnix(ln *UnixListener) error {
	return s.serve(ln, DoorUnix, func(ctx context.Context, c net.Conn) context.Context {
		if pa, ok := c.RemoteAddr().(*peerAddr); ok {
			return context.WithValue(ctx, peerKey{}, pa.cred)
		}
		return ctx
	})
}

// checkSocketPath refuses a socket path that is not absolute and clean,
// or whose directories someone other than owner (or root) could change.
func checkSocketPath(path string, owner int) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || strings.HasSuffix(path, "/") {
		return fmt.Errorf("%w: %q must be an absolute path without . or .. parts", ErrUnsafeSocketPath, path)
	}
	parent := filepath.Dir(path)
	dirs := []string{parent}
	for d := parent; d != filepath.Dir(d); {
		d = filepath.Dir(d)
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUnsafeSocketPath, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s is not a directory (a symbolic link is refused too)", ErrUnsafeSocketPath, d)
		}
		uid, ok := fileOwner(fi)
		if !ok {
			return ErrUnixUnsupported
		}
		if uid != 0 && int64(uid) != int64(owner) {
			return fmt.Errorf("%w: %s belongs to uid %d, not to the broker's user (%d) or root", ErrUnsafeSocketPath, d, uid, owner)
		}
		sticky := uid == 0 && fi.Mode()&fs.ModeSticky != 0 && d != parent
		if fi.Mode().Perm()&0o022 != 0 && !sticky {
			return fmt.Errorf("%w: %s is writable by others (mode %04o); the socket's directory must be writable only by its owner", ErrUnsafeSocketPath, d, fi.Mode().Perm())
		}
	}
	return nil
}

// stampedHeaders are the headers the adapter stamps on what an app
// receives or on what passes between its sessions: PrincipalHeader (the
// sender's kernel-verified principal) and vouchHeader (a reply's
// voucher). What a client sends never carries them on: a frame it sends,
// a topic frame it publishes (live and retained).
var stampedHeaders = []string{PrincipalHeader, vouchHeader}

// stripStamped removes every spelling of the stampedHeaders from m, and
// reports whether there was one. A key with a colon counts by what comes
// before it: the client reads a line's key up to its first colon, and
// ends the connection on a second or non-canonical one.
func stripStamped(m *wire.Message) bool {
	var found []string
	for k := range m.Headers() {
		key, _, _ := strings.Cut(k, ":")
		for _, h := range stampedHeaders {
			if strings.EqualFold(key, h) {
				found = append(found, k)
				break
			}
		}
	}
	for _, k := range found {
		m.Del(k)
	}
	return len(found) > 0
}
