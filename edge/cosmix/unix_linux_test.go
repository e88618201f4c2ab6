package cosmix

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// peerScript connects to the socket in argv[1], asks for the WebSocket
// upgrade and prints what came back ("" when the broker hung up).
const peerScript = `
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
got = b""
try:
    s.sendall(b"GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    while True:
        b = s.recv(4096)
        if not b:
            break
        got += b
except OSError:
    pass
sys.stdout.write(got.decode("latin-1"))
`

// A process of another OS user that reaches the socket (here the socket
// is opened to all on purpose, as root could) is hung up on before a byte
// is read. Needs root, to run the peer as nobody (65534).
func TestAPeerOfAnotherUserIsHungUpOn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect as another user; TestCheckPeerAdmitsOnlyTheBrokersOwnUser covers the rule")
	}
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no " + py + " to run as another user")
	}
	u := startUnix(t)
	if err := os.Chmod(filepath.Dir(u.sock), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(u.sock, 0o666); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctxT(t), py, "-c", peerScript, u.sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("peer as nobody: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "HTTP/") {
		t.Fatalf("another user's peer was answered:\n%s", out)
	}
	if got := u.srv.Stats().Refused[Refusal{DoorUnix, RefusedForeignPeer}]; got != 1 {
		t.Fatalf("refused %d foreign peers, want 1", got)
	}
	// The owner's own connections still come in.
	a := u.dialUnix()
	a.send("---\ncommand: noded.ping\nid: 1\nto: noded\ntype: request\n---\n")
	if m := a.recvMsg(); m.Value("rc") != "0" {
		t.Fatalf("ping after the refusal: %v", m)
	}
}
