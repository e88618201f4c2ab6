// Package testbroker starts a real broker on a real socket for tests: a
// temporary directory, a principals store, a listener on the chosen
// transport, and cleanup that shuts it down.
package testbroker

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/internal/testcert"
	"busbar/transport"
	"busbar/wire"
)

// Transports lists the schemes Start accepts; "inproc" uses
// Broker.DialInProcess; "ws" and "wss" a WebSocketListener behind a real
// HTTP server, as busbar serve's HTTP listener.
var Transports = []string{"unix", "tcp", "tls", "inproc", "ws", "wss"}

// Env is a running broker and what a client needs to reach it.
type Env struct {
	Broker    *broker.Broker
	Scheme    string
	Endpoint  string      // empty for inproc
	ClientTLS *tls.Config // for tls
	Store     *auth.Store
	Secrets   map[string]string             // principal -> secret
	Keys      map[string]ed25519.PrivateKey // principal -> key, for public-key principals
	Dir       string
}

// Principals is the default store: "local" may do anything as any node;
// "pk" is the same with a public key; extra principals come from the test.
func principals(t testing.TB, extra []auth.Principal) ([]auth.Principal, map[string]string, map[string]ed25519.PrivateKey) {
	secrets := map[string]string{}
	keys := map[string]ed25519.PrivateKey{}
	secret, hash, err := auth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	secrets["local"] = secret
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keys["pk"] = priv
	ps := []auth.Principal{
		{Name: "local", SecretHash: hash, Nodes: []auth.Pattern{"*"}, Permissions: auth.AllPermissions()},
		{Name: "pk", PublicKey: "ed25519:" + base64.StdEncoding.EncodeToString(pub), Nodes: []auth.Pattern{"*"}, Permissions: auth.AllPermissions()},
	}
	for _, p := range extra {
		s, h, err := auth.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		p.SecretHash = h
		secrets[p.Name] = s
		ps = append(ps, p)
	}
	return ps, secrets, keys
}

// Start runs a broker with opts on scheme ("unix", "tcp", "tls" or
// "inproc"). Extra principals get fresh secrets (see Env.Secrets).
func Start(t testing.TB, scheme string, opts broker.Options, extra ...auth.Principal) *Env {
	t.Helper()
	ps, secrets, keys := principals(t, extra)
	store, err := auth.NewStore(ps)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, scheme, opts, &Env{Store: store, Secrets: secrets, Keys: keys})
}

// StartSharing is Start with the principals of like (its store, secrets
// and keys): another broker of one bus, as brokers that share a
// principals file.
func StartSharing(t testing.TB, scheme string, opts broker.Options, like *Env) *Env {
	t.Helper()
	return start(t, scheme, opts, &Env{Store: like.Store, Secrets: like.Secrets, Keys: like.Keys})
}

// start runs a broker with opts on scheme for e, whose principals are set.
func start(t testing.TB, scheme string, opts broker.Options, e *Env) *Env {
	t.Helper()
	if opts.Auth == nil {
		opts.Auth = e.Store
	}
	b, err := broker.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.Broker, e.Scheme, e.Dir = b, scheme, t.TempDir()
	var serverTLS *tls.Config
	var ep transport.Endpoint
	switch scheme {
	case "unix":
		ep = transport.Endpoint{Scheme: transport.SchemeUnix, Address: filepath.Join(e.Dir, "busbar.sock")}
	case "tcp":
		ep = transport.Endpoint{Scheme: transport.SchemeTCP, Address: "127.0.0.1:0"}
	case "tls":
		certFile, keyFile, roots := testcert.Write(t)
		if serverTLS, err = transport.LoadTLS(certFile, keyFile); err != nil {
			t.Fatal(err)
		}
		e.ClientTLS = &tls.Config{RootCAs: roots, ServerName: "localhost"}
		ep = transport.Endpoint{Scheme: transport.SchemeTLS, Address: "127.0.0.1:0"}
	case "inproc", "ws", "wss":
	default:
		t.Fatalf("unknown transport %q", scheme)
	}
	served := make(chan error, 1)
	if scheme == "ws" || scheme == "wss" {
		ln := e.serveWebSocket(t, scheme)
		go func() { served <- b.Serve(ln) }()
	} else if scheme != "inproc" {
		ln, err := transport.Listen(ep, serverTLS)
		if err != nil {
			t.Fatal(err)
		}
		if ep.Scheme != transport.SchemeUnix {
			ep.Address = ln.Addr().String()
		}
		e.Endpoint = ep.String()
		go func() { served <- b.Serve(ln) }()
	} else {
		served <- broker.ErrClosed
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("broker shutdown: %v", err)
		}
		if err := <-served; err != nil && !errors.Is(err, broker.ErrClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return e
}

// Dial connects to the broker over the env's transport, for raw-protocol
// tests.
func (e *Env) Dial(ctx context.Context) (net.Conn, error) {
	if e.Scheme == "inproc" {
		return e.Broker.DialInProcess()
	}
	ep, err := transport.ParseEndpoint(e.Endpoint)
	if err != nil {
		return nil, err
	}
	return transport.Dial(ctx, ep, e.ClientTLS)
}

// Eventually polls cond until it holds or timeout passes: at once, then
// at intervals growing from 1ms to 10ms.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Await(t, timeout, what, func() error {
		if !cond() {
			return errNotYet
		}
		return nil
	})
}

var errNotYet = errors.New("condition not met")

// Await polls check until it returns nil or timeout passes, then fails
// with check's last error: the state the test was still waiting on. It
// checks at once, then at intervals growing from 1ms to 10ms.
func Await(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	await(t, timeout, time.Millisecond, 10*time.Millisecond, what, check)
}

// AwaitEvery is Await checking every interval, for a check too costly to
// run more often (one that starts a process, say).
func AwaitEvery(t testing.TB, timeout, interval time.Duration, what string, check func() error) {
	t.Helper()
	await(t, timeout, interval, interval, what, check)
}

func await(t testing.TB, timeout, pause, maxPause time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("timed out after %v waiting for %s", timeout, what)
			}
			t.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(pause) // polling, not synchronisation: check decides
		pause = min(2*pause, maxPause)
	}
}

// Raw is a hand-driven protocol connection, for tests of what a
// misbehaving client sends.
type Raw struct {
	Conn net.Conn
	R    *wire.Reader
	Info wire.Info
}

// DialRaw connects and reads bus.info, without saying hello.
func (e *Env) DialRaw(t testing.TB) *Raw {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := e.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	r := &Raw{Conn: nc, R: wire.NewReader(nc)}
	m := r.Read(t)
	if m.Value(wire.HeaderCommand) != wire.CmdInfo {
		t.Fatalf("first frame %q", m)
	}
	if err := json.Unmarshal(m.Body(), &r.Info); err != nil {
		t.Fatal(err)
	}
	return r
}

// Hello sends bus.hello with the given protocol version and returns the
// broker's answer.
func (r *Raw) Hello(t testing.TB, version, node, principal, secret string) *wire.Message {
	t.Helper()
	body, _ := json.Marshal(wire.Hello{Node: node, Principal: principal, Secret: secret})
	r.Send(t, wire.New(wire.TypeRequest, wire.CmdHello).WithHeader(wire.HeaderBus, version).WithHeader(wire.HeaderID, "hello-1").WithBody(body))
	return r.Read(t)
}

// Send writes one message.
func (r *Raw) Send(t testing.TB, m *wire.Message) {
	t.Helper()
	r.SendBytes(t, mustFrame(t, m))
}

// SendBytes writes raw bytes.
func (r *Raw) SendBytes(t testing.TB, b []byte) {
	t.Helper()
	_ = r.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.Conn.Write(b); err != nil {
		t.Fatal(err)
	}
}

func mustFrame(t testing.TB, m *wire.Message) []byte {
	f, err := wire.AppendFrame(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Read reads the next non-heartbeat message within 5 seconds.
func (r *Raw) Read(t testing.TB) *wire.Message {
	t.Helper()
	m, err := r.ReadErr()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ReadErr is Read returning the error.
func (r *Raw) ReadErr() (*wire.Message, error) {
	for {
		_ = r.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, err := r.R.ReadMessage()
		if err != nil || !m.IsHeartbeat() {
			return m, err
		}
	}
}

// PausableConn stops handing bytes to its reader while paused, as a peer
// that stopped reading would: the broker's socket to it fills up.
type PausableConn struct {
	net.Conn
	mu     sync.Mutex
	paused bool
	resume chan struct{}
}

// Pause stops Read until Resume.
func (p *PausableConn) Pause() {
	p.mu.Lock()
	if !p.paused {
		p.paused, p.resume = true, make(chan struct{})
	}
	p.mu.Unlock()
}

// Resume lets Read go on.
func (p *PausableConn) Resume() {
	p.mu.Lock()
	if p.paused {
		p.paused = false
		close(p.resume)
	}
	p.mu.Unlock()
}

// Read waits while the connection is paused, then reads. Bytes a Read
// already waiting when Pause came brings in are held until Resume too, so
// nothing reaches the reader after Pause returns.
func (p *PausableConn) Read(b []byte) (int, error) {
	p.wait()
	n, err := p.Conn.Read(b)
	p.wait()
	return n, err
}

func (p *PausableConn) wait() {
	p.mu.Lock()
	paused, ch := p.paused, p.resume
	p.mu.Unlock()
	if paused {
		<-ch
	}
}

// Close resumes a paused reader and closes the connection.
func (p *PausableConn) Close() error {
	p.Resume()
	return p.Conn.Close()
}

// serveWebSocket starts an HTTP server on loopback (over TLS for wss) that
// hands its WebSocket connections to the listener it returns.
func (e *Env) serveWebSocket(t testing.TB, scheme string) net.Listener {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := transport.Endpoint{Scheme: transport.Scheme(scheme), Address: tcp.Addr().String()}
	e.Endpoint = ep.String()
	wsl := transport.NewWebSocketListener(tcp.Addr(), transport.WebSocketOptions{})
	mux := http.NewServeMux()
	mux.Handle(transport.WebSocketPath, wsl)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	var ln net.Listener = tcp
	if scheme == "wss" {
		certFile, keyFile, roots := testcert.Write(t)
		cfg, err := transport.LoadTLS(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		e.ClientTLS = &tls.Config{RootCAs: roots, ServerName: "localhost"}
		ln = tls.NewListener(tcp, cfg)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	// Registered before the broker's shutdown, so it runs after it: the
	// broker closes its connections, then the HTTP server goes.
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return wsl
}

// ServeOtherVersion listens on the Unix socket path as a broker that
// speaks only protocol versions lo to hi: its bus.info says so, and it
// answers every hello with VERSION. It stops at cleanup.
func ServeOtherVersion(t testing.TB, path string, lo, hi int) {
	t.Helper()
	ln, err := transport.Listen(transport.Endpoint{Scheme: transport.SchemeUnix, Address: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { answerOtherVersion(nc, lo, hi) })
		}
	})
}

func answerOtherVersion(nc net.Conn, lo, hi int) {
	defer nc.Close()
	v := strconv.Itoa(hi)
	info, _ := json.Marshal(wire.Info{Broker: "other-version", Protocol: v, Min: lo, Max: hi, Nonce: make([]byte, 32)})
	w := wire.NewWriter(nc)
	_ = w.WriteMessage(wire.New(wire.TypeEvent, wire.CmdInfo).WithHeader(wire.HeaderBus, v).WithBody(info))
	_ = w.Flush()
	if _, err := wire.NewReader(nc).ReadMessage(); err != nil {
		return
	}
	_ = w.WriteMessage(wire.New(wire.TypeResponse, wire.CmdHello).WithHeader(wire.HeaderRC, strconv.Itoa(int(wire.RCError))).
		WithHeader(wire.HeaderResult, string(wire.ResultVersion)).WithHeader(wire.HeaderError, "this broker speaks versions "+strconv.Itoa(lo)+" to "+v))
	_ = w.Flush()
}
