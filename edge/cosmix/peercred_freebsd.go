//go:build freebsd

package cosmix

import (
	"net"

	"golang.org/x/sys/unix"
)

const unixSupported = true

// peerCred reads LOCAL_PEERCRED: the peer's effective uid and groups (the
// first its gid). The pid is not read (PeerCred.PID 0).
func peerCred(c net.Conn) (PeerCred, error) {
	var cred PeerCred
	err := control(c, func(fd int) error {
		x, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
		if err != nil {
			return err
		}
		cred.UID = x.Uid
		if x.Ngroups > 0 {
			cred.GID = x.Groups[0]
		}
		return nil
	})
	return cred, err
}
