package moonbridge

import (
	"fmt"
	"net"
	"testing"
	"time"

	"busbar/broker"
)

// With the broker's default admission, idleFlood connections from one
// address that never send REGISTER keep no other address out: they hold
// at most that address's share of the login pool
// (broker.DefaultMaxHandshakesPerAddr), and none of MaxConnections, so
// backends from another address (127.0.0.2: Linux routes all of
// 127.0.0.0/8 to the loopback) all register.
func TestIdleFloodFromOneAddressLeavesOthersRoom(t *testing.T) {
	e := startWith(t, broker.Options{}, nil, nil)
	for range idleFlood {
		nc, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		_ = nc.SetDeadline(time.Now().Add(wait))
		_, _ = ReadFrame(nc) // its HELLO, or nothing: closed for lack of room
	}
	e.dialer.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	const legitimate = 41
	for i := range legitimate {
		name := fmt.Sprintf("island-%d", i)
		if _, err := e.dial(registration(name, name, "primary"), secretA); err != nil {
			t.Fatalf("registration %d of %d from another address beside %d idle connections: %v", i+1, legitimate, idleFlood, err)
		}
	}
}
