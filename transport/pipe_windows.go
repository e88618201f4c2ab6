package transport

import (
	"fmt"
	"net"
)

// Pipe returns the two ends of an in-process connection. Windows has no
// socketpair, so the ends are a loopback TCP connection: like a
// socketpair, and unlike net.Pipe, they have kernel buffering and working
// deadlines, so an embedded client behaves like a remote one. The
// listener lives only until its one connection is accepted, and a
// connection from anyone else meanwhile is refused by address.
func Pipe() (client, server net.Conn, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("transport: pipe: %w", err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, nil, fmt.Errorf("transport: pipe: %w", err)
	}
	for {
		server, err = ln.Accept()
		if err != nil {
			client.Close()
			return nil, nil, fmt.Errorf("transport: pipe: %w", err)
		}
		if server.RemoteAddr().String() == client.LocalAddr().String() {
			return client, server, nil
		}
		server.Close() // another process found the port first
	}
}
