//go:build unix

package transport

import (
	"errors"
	"os"
	"syscall"
)

// socketMode is the unix socket's permission: only the broker's user.
const socketMode = 0o600

// chmodSocket gives a socket its file mode before bind (see bindUnix).
func chmodSocket(fd uintptr) { _ = syscall.Fchmod(int(fd), socketMode) }

// restrictSocket gives the socket file at path its mode: only the
// broker's user may connect.
func restrictSocket(path string) error { return os.Chmod(path, socketMode) }

// IsConnRefused reports whether a dial failed because nothing listens
// there: no process on a TCP port, or a unix socket file left by a
// process that is gone.
func IsConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// IsNoUnixSockets reports whether a listen or dial failed because the
// system has no Unix sockets at all.
func IsNoUnixSockets(err error) bool { return errors.Is(err, syscall.EAFNOSUPPORT) }

// isAddrInUse reports whether a listen failed because something listens
// on the address already.
func isAddrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }
