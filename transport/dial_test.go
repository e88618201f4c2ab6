package transport

// Dialing: cancellation, TLS handshakes bounded by the context, server
// verification and default hosts.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// A Dial ended by its context returns the context's error. Nothing else
// in these dials ends them (the peer never accepts or never handshakes,
// and Dial has no timeout of its own), so that error is the proof; how
// soon it came is the machine's speed, not asserted.

func TestDialCancelledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Dial(ctx, Endpoint{SchemeUnix, sockPath(t)}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial with cancelled ctx: %v, want context.Canceled", err)
	}
}

// TestDialTLSHandshakeHonoursContext dials a listener whose owner never
// accepts: TCP connects via the kernel backlog, the handshake then waits
// forever, and only ctx can end it.
func TestDialTLSHandshakeHonoursContext(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	e := Endpoint{SchemeTLS, ln.Addr().String()}

	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := Dial(ctx, e, &tls.Config{ServerName: "localhost"})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Dial: %v, want context.DeadlineExceeded", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		timer := time.AfterFunc(100*time.Millisecond, cancel)
		defer timer.Stop()
		_, err := Dial(ctx, e, &tls.Config{ServerName: "localhost"})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Dial: %v, want context.Canceled", err)
		}
	})
}

// TestDialTLSVerifies checks that a nil config still verifies the server:
// the test's self-signed certificate is not in the system roots.
func TestDialTLSVerifies(t *testing.T) {
	t.Parallel()
	srv, cli := serverTLS(t)
	ln := mustListen(t, "tls://127.0.0.1:0", srv)
	port := ln.Addr().(*net.TCPAddr).Port
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	defer func() { ln.Close(); <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	e := Endpoint{SchemeTLS, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	_, err := Dial(ctx, e, nil)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("Dial with nil config: %v, want x509.UnknownAuthorityError", err)
	}

	// By name: ServerName comes from the endpoint's host.
	e = Endpoint{SchemeTLS, net.JoinHostPort("localhost", strconv.Itoa(port))}
	c, err := Dial(ctx, e, cli)
	if err != nil {
		t.Fatalf("Dial %s: %v", e, err)
	}
	if got := c.(*tls.Conn).ConnectionState().ServerName; got != "localhost" {
		t.Errorf("ServerName = %q, want localhost", got)
	}
	c.Close()
}

// TestDialTCPEmptyHost checks that "tcp://:port" dials localhost.
func TestDialTCPEmptyHost(t *testing.T) {
	t.Parallel()
	ln := mustListen(t, "tcp://127.0.0.1:0", nil)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, Endpoint{SchemeTCP, ":" + strconv.Itoa(port)}, nil)
	if err != nil {
		ln.Close()
		<-accepted
		t.Fatalf("Dial tcp://:%d: %v", port, err)
	}
	defer c.Close()
	s := <-accepted
	defer s.Close()
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err != nil || !ap.Addr().IsLoopback() {
		t.Fatalf("dialled %v, want loopback", c.RemoteAddr())
	}
}
