//go:build !linux && !darwin && !freebsd

package cosmix

import "net"

// unixSupported is false: busbar reads no peer credentials here, so
// Server.ListenUnix refuses with ErrUnixUnsupported.
const unixSupported = false

func peerCred(net.Conn) (PeerCred, error) { return PeerCred{}, ErrUnixUnsupported }
