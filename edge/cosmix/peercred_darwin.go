//go:build darwin

package cosmix

import (
	"net"

	"golang.org/x/sys/unix"
)

const unixSupported = true

// peerCred reads LOCAL_PEERCRED (the peer's effective uid and groups, the
// first its gid) and LOCAL_PEERPID.
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
		if pid, err := unix.GetsockoptInt(fd, unix.SOL_LOCAL, unix.LOCAL_PEERPID); err == nil {
			cred.PID = int32(pid)
		}
		return nil
	})
	return cred, err
}
