package transport

import (
	"errors"

	"golang.org/x/sys/windows"
)

// chmodSocket does nothing: Windows has no file modes. Who may connect
// to a unix socket is decided by the socket file's ACL, which it inherits
// from its directory: the broker's data directory, owner-only (see
// auth.PrepareDataDir).
func chmodSocket(uintptr) {}

// restrictSocket does nothing, as chmodSocket.
func restrictSocket(string) error { return nil }

// IsConnRefused reports whether a dial failed because nothing listens
// there: no process on a TCP port, or a unix socket file left by a
// process that is gone. Winsock reports its own error numbers.
func IsConnRefused(err error) bool { return errors.Is(err, windows.WSAECONNREFUSED) }

// IsNoUnixSockets reports whether a listen or dial failed because the
// system has no Unix sockets at all: Windows before 10 version 1803 has
// no AF_UNIX.
func IsNoUnixSockets(err error) bool { return errors.Is(err, windows.WSAEAFNOSUPPORT) }

// isAddrInUse reports whether a listen failed because something listens
// on the address already.
func isAddrInUse(err error) bool { return errors.Is(err, windows.WSAEADDRINUSE) }
