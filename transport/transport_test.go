package transport

// One body over every connection type (pipe, Unix, TCP, TLS): echo and
// deadlines.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// connPair returns two connected ends, dialer side first.
type connPair func(t *testing.T) (client, server net.Conn)

// testConnTypes runs body over every transport, in the manner of yamux's
// testConnTypes, so each behaves the same to the layers above.
func testConnTypes(t *testing.T, body func(t *testing.T, client, server net.Conn)) {
	types := []struct {
		name string
		pair connPair
	}{
		{"unix", func(t *testing.T) (net.Conn, net.Conn) {
			return listenDial(t, "unix://"+sockPath(t), nil, nil)
		}},
		{"tcp", func(t *testing.T) (net.Conn, net.Conn) {
			return listenDial(t, "tcp://127.0.0.1:0", nil, nil)
		}},
		{"tls", func(t *testing.T) (net.Conn, net.Conn) {
			srv, cli := serverTLS(t)
			return listenDial(t, "tls://127.0.0.1:0", srv, cli)
		}},
		{"pipe", func(t *testing.T) (net.Conn, net.Conn) {
			c, s, err := Pipe()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := c.(*net.UnixConn); !ok {
				t.Errorf("Pipe client is %T, want *net.UnixConn", c)
			}
			if _, ok := s.(*net.UnixConn); !ok {
				t.Errorf("Pipe server is %T, want *net.UnixConn", s)
			}
			return c, s
		}},
	}
	for _, tt := range types {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, s := tt.pair(t)
			t.Cleanup(func() { c.Close(); s.Close() })
			body(t, c, s)
		})
	}
}

// listenDial listens on endpoint s, dials it and returns both ends.
func listenDial(t *testing.T, s string, serverCfg, clientCfg *tls.Config) (client, server net.Conn) {
	t.Helper()
	ln := mustListen(t, s, serverCfg)
	e, _ := ParseEndpoint(s)
	if e.Scheme != SchemeUnix {
		e = endpointOf(t, e.Scheme, ln)
	}
	type result struct {
		c   net.Conn
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if tc, ok := c.(*tls.Conn); ok {
			// Accept does not handshake and Dial waits for it.
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			if err = tc.Handshake(); err != nil {
				tc.Close()
			}
			tc.SetDeadline(time.Time{})
		}
		accepted <- result{c, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, err := Dial(ctx, e, clientCfg)
	if err != nil {
		ln.Close()
		<-accepted
		t.Fatalf("Dial(%s): %v", e, err)
	}
	r := <-accepted
	if r.err != nil {
		client.Close()
		t.Fatalf("Accept: %v", r.err)
	}
	return client, r.c
}

func TestConnTypes(t *testing.T) {
	testConnTypes(t, func(t *testing.T, client, server net.Conn) {
		// Bound everything: a broken transport fails here, not at the
		// test binary's timeout.
		deadline := time.Now().Add(10 * time.Second)
		client.SetDeadline(deadline)
		server.SetDeadline(deadline)

		echo(t, client, server, 1<<20) // client speaks, server echoes
		echo(t, server, client, 1<<20) // and the other way round

		checkReadDeadline(t, client)
		checkReadDeadline(t, server)
		checkWriteDeadline(t, client)
	})
}

// echo sends n random bytes from a to b, which echoes them back, while a
// reads them back concurrently (so neither side's buffers fill and stall),
// and checks the bytes.
func echo(t *testing.T, a, b net.Conn, n int64) {
	t.Helper()
	want := make([]byte, n)
	rand.Read(want)
	echoed := make(chan error, 1)
	go func() {
		_, err := io.CopyN(b, b, n)
		echoed <- err
	}()
	written := make(chan error, 1)
	go func() {
		_, err := a.Write(want)
		written <- err
	}()
	got := make([]byte, n)
	_, rerr := io.ReadFull(a, got)
	if err := <-written; err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := <-echoed; err != nil {
		t.Fatalf("echo: %v", err)
	}
	if rerr != nil {
		t.Fatalf("read back: %v", rerr)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("echoed bytes differ from those sent")
	}
}

// checkReadDeadline: the peer writes nothing, so only the deadline can
// end the Read, and its error says so (how soon is the machine's speed).
func checkReadDeadline(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past deadline: %v, want a timeout net.Error", err)
	}
}

// checkWriteDeadline runs last: on a tls.Conn a write timeout is permanent.
func checkWriteDeadline(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(-time.Second))
	_, err := c.Write([]byte("x"))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Write past deadline: %v, want a timeout net.Error", err)
	}
}
