package transport

// Listening: Unix socket modes and lifecycle (stale, live, foreign files,
// path limit), TCP ports in use, TLS configuration and bad endpoints.

import (
	"context"
	"crypto/tls"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestListenUnixMode(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("Windows has no file modes: the socket keeps its directory's ACL")
	}
	path := sockPath(t)
	mustListen(t, "unix://"+path, nil)
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode = %v, want socket 0600", fi.Mode())
	}
}

func TestListenUnixRemovedOnClose(t *testing.T) {
	t.Parallel()
	path := sockPath(t)
	ln := mustListen(t, "unix://"+path, nil)
	ln.Close()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket file after Close: %v, want it gone", err)
	}
}

func TestListenUnixStaleSocketReplaced(t *testing.T) {
	t.Parallel()
	path := sockPath(t)
	// A crash leaves the file with nobody listening.
	old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	old.SetUnlinkOnClose(false)
	old.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}

	ln := mustListen(t, "unix://"+path, nil)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := Dial(context.Background(), Endpoint{SchemeUnix, path}, nil)
	if err != nil {
		t.Fatalf("Dial after replacing stale socket: %v", err)
	}
	c.Close()
	ln.Close() // ends the Accept goroutine if Dial raced it
}

func TestListenUnixLiveSocket(t *testing.T) {
	t.Parallel()
	path := sockPath(t)
	live := mustListen(t, "unix://"+path, nil)
	_, err := Listen(Endpoint{SchemeUnix, path}, nil)
	if !errors.Is(err, ErrAddressInUse) {
		t.Fatalf("Listen on a live socket: %v, want ErrAddressInUse", err)
	}
	// The live broker is undisturbed: its socket still answers. (The
	// probe's connection sits in its backlog; accepting it drains it.)
	accepted := make(chan error, 1)
	go func() {
		for range 2 {
			c, err := live.Accept()
			if err != nil {
				accepted <- err
				return
			}
			c.Close()
		}
		accepted <- nil
	}()
	c, err := Dial(context.Background(), Endpoint{SchemeUnix, path}, nil)
	if err != nil {
		t.Fatalf("live socket no longer answers: %v", err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
}

func TestListenUnixRegularFileUntouched(t *testing.T) {
	t.Parallel()
	path := sockPath(t)
	if err := os.WriteFile(path, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(Endpoint{SchemeUnix, path}, nil)
	if err == nil {
		ln.Close()
		t.Fatal("Listen over a regular file succeeded")
	}
	if errors.Is(err, ErrAddressInUse) || !errors.Is(err, fs.ErrExist) {
		t.Errorf("Listen over a regular file: %v, want fs.ErrExist and not ErrAddressInUse", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "precious" {
		t.Fatalf("regular file changed: %q, %v", b, err)
	}
}

func TestListenUnixPathLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pad := MaxUnixPathLen - len(dir) - 1
	if pad < 1 {
		t.Skipf("temporary directory %q is too long", dir)
	}
	path := filepath.Join(dir, strings.Repeat("s", pad))
	if len(path) != MaxUnixPathLen {
		t.Fatalf("built a %d-byte path", len(path))
	}
	// The constant matches what the kernel and net package accept.
	ln := mustListen(t, "unix://"+path, nil)
	ln.Close()
	_, err := Listen(Endpoint{SchemeUnix, path + "s"}, nil)
	if !errors.Is(err, ErrBadEndpoint) {
		t.Fatalf("Listen on a %d-byte path: %v, want ErrBadEndpoint", len(path)+1, err)
	}
}

func TestListenTCPInUse(t *testing.T) {
	t.Parallel()
	ln := mustListen(t, "tcp://127.0.0.1:0", nil)
	_, err := Listen(endpointOf(t, SchemeTCP, ln), nil)
	if !errors.Is(err, ErrAddressInUse) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second Listen: %v, want ErrAddressInUse wrapping EADDRINUSE", err)
	}
}

func TestListenTLSNeedsCertificate(t *testing.T) {
	t.Parallel()
	e := Endpoint{SchemeTLS, "127.0.0.1:0"}
	for name, cfg := range map[string]*tls.Config{
		"nil":            nil,
		"empty":          {},
		"no certificate": {ServerName: "localhost"},
	} {
		if ln, err := Listen(e, cfg); err == nil {
			ln.Close()
			t.Errorf("Listen with %s config succeeded", name)
		}
	}
	// A usable config is accepted, and copied rather than modified.
	srv, _ := serverTLS(t)
	srv.MinVersion = 0
	mustListen(t, "tls://127.0.0.1:0", srv)
	if srv.MinVersion != 0 {
		t.Error("Listen modified the caller's tls.Config")
	}
}

func TestListenBadEndpoint(t *testing.T) {
	t.Parallel()
	for _, e := range []Endpoint{{}, {"udp", "127.0.0.1:0"}, {SchemeUnix, "rel.sock"}, {SchemeTLS, ":0"}} {
		if ln, err := Listen(e, nil); !errors.Is(err, ErrBadEndpoint) {
			if ln != nil {
				ln.Close()
			}
			t.Errorf("Listen(%#v): %v, want ErrBadEndpoint", e, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if c, err := Dial(ctx, e, nil); !errors.Is(err, ErrBadEndpoint) {
			if c != nil {
				c.Close()
			}
			t.Errorf("Dial(%#v): %v, want ErrBadEndpoint", e, err)
		}
		cancel()
	}
}
