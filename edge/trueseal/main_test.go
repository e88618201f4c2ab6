package trueseal

// The test binary fails if a test leaves a goroutine behind. This file
// also holds the helpers: a relay store and a server on 127.0.0.1:0,
// closed at cleanup, and a trueseal client that does the handshakes and
// frames the way trueseal's clients do, with the same Noise library.

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/flynn/noise"

	"busbar/edge/edgetest"
	"busbar/internal/leakcheck"
	"busbar/relay"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashHelperEnv) != "" {
		crashHelper() // a child process of the crash test; never returns
	}
	leakcheck.Main(m)
}

type fixture struct {
	dir   string
	store *relay.Store
	srv   *Server
	addr  string
	key   noise.DHKey
	logs  *edgetest.LogBuffer
}

// start opens a store and a server over it; both close at cleanup.
func start(t *testing.T, opts Options, ropts relay.Options) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), logs: &edgetest.LogBuffer{}}
	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ropts.Logger = log
	st, err := relay.Open(f.dir+"/relay", ropts)
	if err != nil {
		t.Fatal(err)
	}
	f.store = st
	if opts.Key.Private == nil {
		k, _, err := LoadOrCreateKey(f.dir)
		if err != nil {
			t.Fatal(err)
		}
		opts.Key = k
	}
	f.key = opts.Key
	opts.Store = st
	srv, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, ErrClosed) {
			t.Errorf("Serve returned %v, want ErrClosed", err)
		}
		st.Close()
	})
	return f
}

// client is one trueseal session seen from the device's side.
type client struct {
	t          testing.TB
	c          net.Conn
	send, recv *noise.CipherState
}

func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func writeMsg(t testing.TB, c net.Conn, msg []byte) {
	t.Helper()
	if _, err := c.Write(appendMessage(nil, msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func readMsg(c net.Conn) ([]byte, error) { return readMessage(c, nil) }

// pushSession does the NK handshake as a trueseal sender: an ephemeral
// key, the relay's static key known in advance.
func pushSession(t testing.TB, addr string, relayPub []byte) *client {
	t.Helper()
	cl, err := tryPushSession(t, addr, relayPub)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func tryPushSession(t testing.TB, addr string, relayPub []byte) (*client, error) {
	cl := &client{t: t, c: dial(t, addr)}
	return cl, pushHandshake(cl, relayPub)
}

// hsPush does the NK handshake on cl's connection.
func hsPush(t testing.TB, cl *client, relayPub []byte) {
	t.Helper()
	if err := pushHandshake(cl, relayPub); err != nil {
		t.Fatal(err)
	}
}

func pushHandshake(cl *client, relayPub []byte) error {
	t, c := cl.t, cl.c
	hs, err := noise.NewHandshakeState(noise.Config{CipherSuite: suite, Pattern: noise.HandshakeNK, Initiator: true, PeerStatic: relayPub})
	if err != nil {
		return err
	}
	msg, _, _, err := hs.WriteMessage(nil, nil)
	if err != nil {
		return err
	}
	writeMsg(t, c, msg)
	resp, err := readMsg(c)
	if err != nil {
		return err
	}
	_, toRelay, toClient, err := hs.ReadMessage(nil, resp)
	if err != nil {
		return err
	}
	cl.send, cl.recv = toRelay, toClient
	return nil
}

// receiveSession does the XX handshake as a trueseal device with static
// key dev, and checks the relay's static key.
func receiveSession(t testing.TB, addr string, relayPub []byte, dev noise.DHKey) *client {
	t.Helper()
	return receiveSessionOn(t, dial(t, addr), relayPub, dev)
}

// receiveSessionOn does receiveSession's handshake on c.
func receiveSessionOn(t testing.TB, c net.Conn, relayPub []byte, dev noise.DHKey) *client {
	t.Helper()
	hs, err := noise.NewHandshakeState(noise.Config{CipherSuite: suite, Pattern: noise.HandshakeXX, Initiator: true, StaticKeypair: dev})
	if err != nil {
		t.Fatal(err)
	}
	msg, _, _, err := hs.WriteMessage(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeMsg(t, c, msg)
	resp, err := readMsg(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := hs.ReadMessage(nil, resp); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hs.PeerStatic(), relayPub) {
		t.Fatal("the relay's static key is not the one configured")
	}
	msg, toRelay, toDevice, err := hs.WriteMessage(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeMsg(t, c, msg)
	return &client{t: t, c: c, send: toRelay, recv: toDevice}
}

func (cl *client) write(typ Type, body []byte) {
	cl.t.Helper()
	ct, err := cl.send.Encrypt(nil, nil, AppendFrame(nil, typ, body))
	if err != nil {
		cl.t.Fatal(err)
	}
	writeMsg(cl.t, cl.c, ct)
}

// read returns the next frame; err is the connection's end.
func (cl *client) read() (Type, []byte, error) {
	msg, err := readMsg(cl.c)
	if err != nil {
		return 0, nil, err
	}
	plain, err := cl.recv.Decrypt(nil, nil, msg)
	if err != nil {
		cl.t.Fatalf("decrypt: %v", err)
	}
	typ, body, err := ParseFrame(plain)
	if err != nil {
		cl.t.Fatalf("frame from the relay: %v", err)
	}
	return typ, body, nil
}

func (cl *client) expect(want Type) []byte {
	cl.t.Helper()
	typ, body, err := cl.read()
	if err != nil {
		cl.t.Fatalf("want %v, the session ended: %v", want, err)
	}
	if typ != want {
		cl.t.Fatalf("got %v, want %v", typ, want)
	}
	return body
}

// expectEnd reads until the relay closes the session; no frame may come.
func (cl *client) expectEnd() {
	cl.t.Helper()
	typ, _, err := cl.read()
	if err == nil {
		cl.t.Fatalf("got %v, want the session closed", typ)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isReset(err) {
		cl.t.Fatalf("session ended with %v", err)
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne)
}

func (cl *client) push(to []byte, envelope []byte) {
	cl.t.Helper()
	cl.write(Push, append(append([]byte(nil), to...), envelope...))
}

func (cl *client) deliverAck(id uint64) {
	cl.t.Helper()
	cl.write(DeliverAck, AppendDeliverBody(nil, id, nil))
}

// deliver reads a Deliver and returns its blob id and envelope.
func (cl *client) deliver() (uint64, []byte) {
	cl.t.Helper()
	id, env, err := ParseBlobID(cl.expect(Deliver))
	if err != nil {
		cl.t.Fatal(err)
	}
	return id, env
}

func newDevice(t testing.TB) noise.DHKey {
	t.Helper()
	k, err := noise.DH25519.GenerateKeypair(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// checkFor polls cond until it holds; the test's own timeout bounds it.
func checkFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		time.Sleep(time.Millisecond)
		if t.Context().Err() != nil {
			t.Fatalf("never: %s", what)
		}
	}
}
