package cli

import (
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"busbar/broker"
	"busbar/internal/testbroker"
)

// wsFloodCeiling is what serve's RSS may grow by while 1,500 WebSocket
// connections upgraded to /bus never say hello (issue: ~130 KB each,
// 214 MB for 1,500, before they were closed at once when evicted).
const wsFloodCeiling = 64 << 20

// TestPreLoginWebSocketFloodIsBoundedAndTheOwnerGetsIn: 1,500 connections
// upgrade to /bus and never log in; serve keeps at most its login pool of
// them, its RSS grows by under wsFloodCeiling, and the owner's logins over
// the Unix socket all succeed meanwhile.
func TestPreLoginWebSocketFloodIsBoundedAndTheOwnerGetsIn(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	m := regexp.MustCompile(`busbar: dashboard at http://127\.0\.0\.1:(\d+)/`).FindStringSubmatch(s.banner)
	if m == nil {
		t.Fatalf("no dashboard URL:\n%s", s.banner)
	}
	port := m[1]
	pid := s.cmd.Process.Pid
	if code, _, errOut := s.busbar(t, "", "ls"); code != 0 { // warm up what a login uses
		t.Fatalf("ls: %s", errOut)
	}
	before := rssBytes(t, pid)

	const flood = 1500
	var closed atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	for i := range flood {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, byte(1+i/250), byte(1+i%250))}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", "127.0.0.1:"+port)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		if _, err := fmt.Fprintf(c, "GET /bus HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", port); err != nil {
			closed.Add(1)
			continue
		}
		wg.Add(1)
		go func() { // owned by the test: ends when serve or Cleanup closes c
			defer wg.Done()
			_, _ = io.Copy(io.Discard, c)
			closed.Add(1)
		}()
	}
	mustClose := int64(flood - broker.DefaultMaxHandshakes)
	waitFor(t, "the flood past the login pool closed", func() bool { return closed.Load() >= mustClose })
	for i := range 20 {
		testbroker.Await(t, 10*time.Second, fmt.Sprintf("owner login %d over the Unix socket", i), func() error {
			if code, out, errOut := s.busbar(t, "", "ls"); code != 0 {
				return fmt.Errorf("ls: %d %s %s", code, out, errOut)
			}
			return nil
		})
	}
	if open := flood - closed.Load(); open > int64(broker.DefaultMaxHandshakes) {
		t.Fatalf("%d flood connections still open, the pool is %d", open, broker.DefaultMaxHandshakes)
	}
	grew := rssBytes(t, pid) - before
	t.Logf("serve's RSS grew by %.1f MiB under %d pre-login WebSocket connections (%d closed)", float64(grew)/(1<<20), flood, closed.Load())
	if grew > wsFloodCeiling {
		t.Fatalf("serve's RSS grew by %d MiB, over the ceiling of %d MiB", grew>>20, wsFloodCeiling>>20)
	}
}
