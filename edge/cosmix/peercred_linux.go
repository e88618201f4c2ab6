//go:build linux

package cosmix

import (
	"net"

	"golang.org/x/sys/unix"
)

const unixSupported = true

// peerCred reads SO_PEERCRED: the peer's credentials when it connected.
func peerCred(c net.Conn) (PeerCred, error) {
	var cred PeerCred
	err := control(c, func(fd int) error {
		u, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err == nil {
			cred = PeerCred{UID: u.Uid, GID: u.Gid, PID: u.Pid}
		}
		return err
	})
	return cred, err
}
