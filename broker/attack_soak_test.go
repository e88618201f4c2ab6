//go:build soak

package broker_test

// The unauthenticated attacks at full scale, with figures. They take a
// minute and tens of thousands of sockets, so they run only with the soak
// tag:
//
//	go test ./broker -tags soak -run 'Soak' -v -count=1
//
// Each prints what a legitimate client saw during the attack.

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/transport"
)

// raiseFileLimit raises the file limit towards n (one process holds both
// ends of every connection) and returns what it is.
func raiseFileLimit(t *testing.T, n uint64) uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if l.Cur < n {
		l.Cur = min(n, l.Max)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			t.Fatal(err)
		}
	}
	return l.Cur
}

// requestFigures has one client request an echo handler for d, and
// reports the rate and the p99.
func requestFigures(t *testing.T, c *client.Client, to string, d time.Duration) (int, time.Duration) {
	t.Helper()
	ch := c.Scope("probe").Channel("probe.echo")
	var lat []time.Duration
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := ch.Request(ctx, to, []byte("x"))
		cancel()
		if err != nil {
			t.Logf("request during the attack: %v", err)
			continue
		}
		lat = append(lat, time.Since(start))
	}
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	return int(float64(len(lat)) / d.Seconds()), lat[len(lat)*99/100]
}

// 1,000 TCP connections that never log in, each announcing a 1 MiB frame
// and sending all of it but one byte. Before the fix the broker held
// 1.33 GB and a normal client made 21 requests in a second (p99 223 ms).
func TestSoakPartialFramesBeforeLogin(t *testing.T) {
	raiseFileLimit(t, 8192)
	e := testbroker.Start(t, "tcp", testOpts())
	srv := connect(t, e, "echo")
	if _, err := srv.Scope("s").Channel("probe.echo").Handle(ctxT(t, 5*time.Second), echo); err != nil {
		t.Fatal(err)
	}
	cl := connect(t, e, "probe")
	baseRate, baseP99 := requestFigures(t, cl, "echo", time.Second)

	ep, _ := transport.ParseEndpoint(e.Endpoint)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const attackers, frame = 1000, 1 << 20
	var wg sync.WaitGroup
	conns := make(chan net.Conn, attackers)
	buf := make([]byte, 4+frame-1) // one buffer, read by every attacker
	binary.BigEndian.PutUint32(buf, frame)
	for range attackers {
		wg.Go(func() {
			nc, err := net.Dial("tcp", ep.Address)
			if err != nil {
				return
			}
			conns <- nc
			_ = nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			_, _ = nc.Write(buf) // the broker closes it after the prefix
		})
	}
	rate, p99 := requestFigures(t, cl, "echo", time.Second)
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	wg.Wait()
	close(conns)
	for nc := range conns {
		_ = nc.Close()
	}
	t.Logf("alone: %d requests/s, p99 %v", baseRate, baseP99)
	t.Logf("during %d partial 1 MiB frames: %d requests/s, p99 %v; heap in use %d MiB (before: %d MiB)",
		attackers, rate, p99, during.HeapInuse>>20, before.HeapInuse>>20)
	if rate == 0 {
		t.Fatal("no request got through during the attack")
	}
}

// 10,050 idle TCP connections opened within a second by a peer that never
// logs in. Before the fix every legitimate client, even on the Unix
// socket, was refused for the next 5 s, and the attack repeats.
func TestSoakIdleLoginFlood(t *testing.T) {
	limit := raiseFileLimit(t, 32768)
	e := testbroker.Start(t, "tcp", testOpts())
	sock := filepath.Join(e.Dir, "local.sock")
	ln, err := transport.Listen(transport.Endpoint{Scheme: transport.SchemeUnix, Address: sock}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.Broker.Serve(ln) }()
	ep, _ := transport.ParseEndpoint(e.Endpoint)

	// 10,050 as in the attack, unless the file limit cannot hold both ends.
	flood := min(10050, int(limit-1024)/2)
	var mu sync.Mutex
	var held []net.Conn
	stop := make(chan struct{})
	var wg sync.WaitGroup
	began := time.Now()
	for range 8 {
		wg.Go(func() {
			for i := 0; i < flood/8; i++ {
				select {
				case <-stop:
					return
				default:
				}
				nc, err := net.Dial("tcp", ep.Address)
				if err != nil {
					continue
				}
				mu.Lock()
				held = append(held, nc)
				mu.Unlock()
			}
		})
	}
	type login struct {
		how string
		ok  int
		bad []string
	}
	// Legitimate clients try once every 50 ms while the flood runs.
	var logins []login
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for _, how := range []string{"tcp", "unix"} {
		l := login{how: how}
		for i := range 20 {
			<-tick.C
			c, err := dialClient(e, fmt.Sprintf("legit-%s-%d", how, i), func(o *client.Options) {
				if how == "unix" {
					o.Server = "unix://" + sock
				}
			})
			if err != nil {
				l.bad = append(l.bad, err.Error())
				continue
			}
			t.Cleanup(func() { c.Close() })
			l.ok++
		}
		logins = append(logins, l)
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	for _, nc := range held {
		_ = nc.Close()
	}
	mu.Unlock()
	s := e.Broker.Stats()
	t.Logf("%d idle connections opened in %v; %d closed while logging in to make room", len(held), time.Since(began).Round(time.Millisecond), s.HandshakesEvicted)
	for _, l := range logins {
		t.Logf("legitimate %s logins during the flood: %d of 20 %v", l.how, l.ok, l.bad)
		if l.ok == 0 {
			t.Errorf("no %s client could log in during the flood", l.how)
		}
	}
}
