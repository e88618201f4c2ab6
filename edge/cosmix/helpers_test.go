package cosmix

// Helpers shared by the tests: a real broker, a cosmix server on a real
// loopback socket, cosmix clients that speak the exact bytes
// cosmix-lib-client's NodedClient writes, and busbar nodes.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// wait bounds each wait of a test for an event that must come; it is a
// failure bound, never a pause.
const wait = 20 * time.Second

type env struct {
	t    *testing.T
	bus  *testbroker.Env
	srv  *Server
	addr string
}

// start runs a broker and a cosmix server in front of it; tweak adjusts
// the server's config.
func start(t *testing.T, tweak func(*Config), extra ...auth.Principal) *env {
	t.Helper()
	return startWith(t, broker.Options{}, tweak, extra...)
}

// startWith is start with a broker of options opts. The server stands
// behind the broker's door (its refusal log and login pool), as serve's.
func startWith(t *testing.T, opts broker.Options, tweak func(*Config), extra ...auth.Principal) *env {
	t.Helper()
	bus := testbroker.Start(t, "inproc", opts, extra...)
	cfg := Config{Dial: Dialer(bus.Broker),
		BrokerName: bus.Broker.Name(), Version: "test", Door: bus.Broker.Door()}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return &env{t: t, bus: bus, srv: srv, addr: ln.Addr().String()}
}

func (e *env) url() string { return e.urlAs("local") }

// urlAs is the URL a cosmix app of principal p is given.
func (e *env) urlAs(p string) string {
	return "ws://" + e.addr + Path + "?" + TokenParam + "=" + p + ":" + e.bus.Secrets[p]
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// app is a cosmix client connection, driven frame by frame.
type app struct {
	t  *testing.T
	ws *websocket.Conn
}

func (e *env) dial() *app { return e.dialURL(e.url()) }

func (e *env) dialURL(url string) *app {
	e.t.Helper()
	ws, resp, err := websocket.Dial(ctxT(e.t), url, nil)
	if err != nil {
		e.t.Fatalf("dial: %v", err)
	}
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	ws.SetReadLimit(-1)
	e.t.Cleanup(func() { _ = ws.CloseNow() })
	return &app{t: e.t, ws: ws}
}

// dialStatus dials url and returns the HTTP status of a refused upgrade.
func dialStatus(t *testing.T, url string, h http.Header) int {
	t.Helper()
	ws, resp, err := websocket.Dial(ctxT(t), url, &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		_ = ws.CloseNow()
		t.Fatalf("dial %s: upgraded, want a refusal", url)
	}
	if resp == nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	return resp.StatusCode
}

func (a *app) send(frame string) {
	a.t.Helper()
	if err := a.ws.Write(ctxT(a.t), websocket.MessageText, []byte(frame)); err != nil {
		a.t.Fatalf("send: %v", err)
	}
}

func (a *app) recv() string {
	a.t.Helper()
	typ, b, err := a.ws.Read(ctxT(a.t))
	if err != nil {
		a.t.Fatalf("recv: %v", err)
	}
	if typ != websocket.MessageText {
		a.t.Fatalf("recv: a %v message", typ)
	}
	return string(b)
}

// expect reads one frame and fails unless it is want, byte for byte.
func (a *app) expect(want string) {
	a.t.Helper()
	if got := a.recv(); got != want {
		a.t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// recvMsg reads one frame, decoded.
func (a *app) recvMsg() *wire.Message {
	a.t.Helper()
	m, err := Decode([]byte(a.recv()))
	if err != nil {
		a.t.Fatal(err)
	}
	return m
}

// register registers name as the client does, and checks noded's answer.
func (a *app) register(name string, id int) {
	a.t.Helper()
	a.send(frame(map[string]string{"command": "noded.register", "from": name, "id": itoa(id), "to": "noded", "type": "request"}, ""))
	a.expect(frame(map[string]string{"command": "noded.register", "from": "noded", "id": itoa(id), "rc": "0", "type": "response"}, `{"registered": "`+name+`"}`))
}

// frame is a cosmix frame as to_wire writes it: headers in key order.
func frame(h map[string]string, body string) string {
	m := wire.Empty()
	for k, v := range h {
		m.Set(k, v)
	}
	m.SetBody([]byte(body))
	return string(Encode(m))
}

// node is a busbar node on the same broker.
func (e *env) node(name string) *client.Client {
	e.t.Helper()
	c, err := client.Connect(ctxT(e.t), client.Options{
		Dial: func(context.Context) (net.Conn, error) { return e.bus.Broker.DialInProcess() },
		Node: name, Credential: auth.Credential{Principal: "local", Secret: e.bus.Secrets["local"]}, MaxReconnects: client.NoReconnect,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// awaitService waits until the registry lists name (or, with gone, no
// longer lists it).
func (e *env) awaitService(c *client.Client, name string, gone bool) {
	e.t.Helper()
	testbroker.Eventually(e.t, wait, "service "+name, func() bool {
		infos, err := c.Whois(ctxT(e.t), name)
		return err == nil && (len(infos) == 0) == gone
	})
}

func announcement(name string) wire.Announcement {
	return wire.Announcement{Service: name, Channels: []string{"x.y"}}
}
