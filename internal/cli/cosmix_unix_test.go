//go:build linux || darwin || freebsd

package cli

// serve --cosmix-socket through the binary: a cosmix client's native
// connection (connect_unix: the WebSocket upgrade of ws://localhost/ws
// over the socket, no token), and the refusal of a socket directory
// others could write to.

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"busbar/internal/testbroker"
)

func TestServeCosmixSocketServesANativeCosmixApp(t *testing.T) {
	data := filepath.Join(t.TempDir(), "state")
	sock := filepath.Join(data, "cosmix.sock")
	s := startServe(t, data, "--cosmix-socket", sock)
	testbroker.Eventually(t, 10*time.Second, "serve to print the cosmix socket", func() bool {
		return strings.Contains(s.stdout.String(), "cosmix apps connect natively to "+sock+" (broker account uid ")
	})
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v %v", fi, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	ws, _, err := websocket.Dial(ctx, "ws://localhost/ws", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	exchange := func(frame, want string) {
		t.Helper()
		if err := ws.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
			t.Fatal(err)
		}
		_, got, err := ws.Read(ctx)
		if err != nil || string(got) != want {
			t.Fatalf("got %q (%v), want %q", got, err, want)
		}
	}
	exchange("---\ncommand: noded.ping\nfrom: service-n\nid: 1\nto: noded\ntype: request\n---\n",
		"---\ncommand: noded.ping\nfrom: noded\nid: 1\nrc: 0\ntype: response\n---\n"+
			`{"pong": true, "extensions": {"core": "1.0", "native-session": "1", "native-session-endpoint": "`+sock+`", "topic": "1.0"}}`+"\n")
	exchange("---\ncommand: noded.register\nfrom: service-n\nid: 2\nto: noded\ntype: request\n---\n",
		"---\ncommand: noded.register\nfrom: noded\nid: 2\nrc: 0\ntype: response\n---\n{\"registered\": \"service-n\"}\n")
	code, out, errOut := s.busbar(t, "", "ls", "--services")
	if code != 0 || !strings.Contains(out, "service-n") {
		t.Fatalf("ls --services: exit %d\n%s%s", code, out, errOut)
	}
}

func TestServeCosmixSocketRefusesADirectoryOthersCanWrite(t *testing.T) {
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runEnv(t, nil, "", "serve", "--data", filepath.Join(t.TempDir(), "state"), "--tcp", "127.0.0.1:0", "--http", "off", "--cosmix-socket", filepath.Join(open, "cosmix.sock"))
	if code != exitUsage || !strings.Contains(errOut, "writable by others") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
