package cli

// serve's HTTP listener under a flood of connections that never finish
// their headers: what they make serve hold is bounded by the login pool
// they share with the bus, while requests with the token, and logins on
// the bus, go through.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"busbar/broker"
	"busbar/edge"
	"busbar/internal/testbroker"
	"busbar/ops"
)

// rssBytes is process pid's resident memory, from /proc.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// metric reads one counter of serve's /metrics.
func metric(t *testing.T, base, token, name string) int64 {
	t.Helper()
	code, body := httpGet(t, base+ops.MetricsPath, token)
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	m := regexp.MustCompile(`(?m)^` + name + ` (\d+)`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// httpFloodCeiling is how much serve's resident memory may grow while
// unauthenticated HTTP connections hold every place of the login pool
// with headers just under the limit (docs/messaging.md#limits).
const httpFloodCeiling = 64 << 20

func TestHTTPHeaderFloodIsBoundedByTheLoginPool(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	m := regexp.MustCompile(`busbar: dashboard at (http://127\.0\.0\.1:(\d+))/\?token=([0-9a-f]+)`).FindStringSubmatch(s.banner)
	if m == nil {
		t.Fatalf("no dashboard URL:\n%s", s.banner)
	}
	base, port, token := m[1], m[2], m[3]
	pid := s.cmd.Process.Pid
	for range 3 { // warm up what a legitimate request uses
		if code, _ := httpGet(t, base+ops.StatusPath, token); code != 200 {
			t.Fatalf("status: %d", code)
		}
	}
	before := rssBytes(t, pid)
	madeRoom := func() int64 { // flood connections evicted, or refused while every place was within its grace
		return metric(t, base, token, "busbar_handshakes_evicted_total") + metric(t, base, token, "busbar_handshakes_refused_total")
	}
	roomBefore := madeRoom()

	// 6 source addresses × 150 connections: more than an address's share
	// (128) from each, more than the pool (512) in all. Each sends a
	// header line just under the limit and never ends it.
	const addrs, perAddr = 6, 150
	line := "GET / HTTP/1.1\r\nHost: busbar\r\nX-Flood: " + strings.Repeat("a", edge.HTTPMaxHeaderBytes-1024)
	var closed atomic.Int64
	var wg sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	for a := range addrs {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+a))}, Timeout: 5 * time.Second}
		for range perAddr {
			c, err := d.Dial("tcp", "127.0.0.1:"+port)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if _, err := io.WriteString(c, line); err != nil {
				closed.Add(1) // evicted already
				continue
			}
			wg.Add(1)
			go func() { // owned by the test: ends when serve or Cleanup closes c
				defer wg.Done()
				_, _ = io.Copy(io.Discard, c)
				closed.Add(1)
			}()
		}
	}
	total := int64(addrs * perAddr)
	mustEvict := total - broker.DefaultMaxHandshakes
	waitFor(t, "evicted flood connections to be closed", func() bool { return closed.Load() >= mustEvict })

	// Requests with the token get through, each taking the place of the
	// oldest flood connection once it is past its grace (a request that
	// comes sooner is refused, and retried as a client would), and so do
	// logins on the bus.
	for i := range 20 {
		testbroker.Await(t, 10*time.Second, fmt.Sprintf("status request %d during the flood", i), func() error {
			code, err := statusCode(base+ops.StatusPath, token)
			if err == nil && code != 200 {
				t.Fatalf("status request %d during the flood: %d", i, code)
			}
			return err
		})
	}
	if code, out, errOut := s.busbar(t, "", "ls"); code != 0 {
		t.Fatalf("ls during the flood: %d %s %s", code, out, errOut)
	}
	if open := total - closed.Load(); open > broker.DefaultMaxHandshakes {
		t.Fatalf("%d flood connections still open, the pool is %d", open, broker.DefaultMaxHandshakes)
	}
	if n := madeRoom() - roomBefore; n < mustEvict {
		t.Fatalf("%d evictions and refusals counted, want at least %d", n, mustEvict)
	}
	grew := rssBytes(t, pid) - before
	t.Logf("serve's RSS grew by %.1f MiB under %d connections (%d closed)", float64(grew)/(1<<20), total, closed.Load())
	if grew > httpFloodCeiling {
		t.Fatalf("serve's RSS grew by %d MiB, over the ceiling of %d MiB", grew>>20, httpFloodCeiling>>20)
	}
}

func TestHTTPHeadersOverTheLimitAreRefused(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	m := regexp.MustCompile(`busbar: listening on ws://(127\.0\.0\.1:\d+)/bus`).FindStringSubmatch(s.banner)
	if m == nil {
		t.Fatalf("no ws URL:\n%s", s.banner)
	}
	for _, tc := range []struct {
		size int
		want string
	}{
		// net/http reads up to the limit plus 4,096 bytes of slack.
		{edge.HTTPMaxHeaderBytes + 4096, "HTTP/1.1 200"},
		{edge.HTTPMaxHeaderBytes + 4096 + 1, "HTTP/1.1 431"},
	} {
		c, err := net.Dial("tcp", m[1])
		if err != nil {
			t.Fatal(err)
		}
		prefix := "GET /healthz HTTP/1.1\r\nHost: busbar\r\nX-Pad: "
		req := prefix + strings.Repeat("a", tc.size-len(prefix)-4) + "\r\n\r\n" // tc.size bytes in all
		wrote := make(chan struct{})
		go func() { // serve may answer before reading it all
			defer close(wrote)
			_, _ = io.WriteString(c, req)
		}()
		status, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		<-wrote
		if !strings.HasPrefix(status, tc.want) {
			t.Fatalf("headers of %d bytes: %q %v, want %s", tc.size, status, err, tc.want)
		}
	}
}

// statusCode is a GET with the token that reports a connection closed
// by serve as an error, not a failure of the test.
func statusCode(url, token string) (int, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// waitFor polls cond until it holds, or fails the test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
