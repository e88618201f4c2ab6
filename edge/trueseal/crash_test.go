package trueseal

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"busbar/relay"
)

// crashHelperEnv, set, makes the test binary a relay that serves trueseal
// over the store in that directory until it is killed.
const crashHelperEnv = "BUSBAR_TRUESEAL_CRASH_HELPER"

func crashHelper() {
	dir := os.Getenv(crashHelperEnv)
	st, err := relay.Open(filepath.Join(dir, "relay"), relay.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	k, _, err := LoadOrCreateKey(dir)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	// No push rate per source address: the test's 400 pushes from one
	// address would pass its burst, and the session would close for it
	// (a temporary refusal) rather than at the kill.
	srv, err := NewServer(Options{Key: k, Store: st, SourcePushRate: -1})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("listening", ln.Addr())
	_ = srv.Serve(ln)
	os.Exit(3)
}

// TestPushKilledBeforeItsAckIsStoredOrUnacked kills the relay (SIGKILL)
// while a client has many pushes outstanding: every push acked before
// the kill is in the store when it opens again, in order.
func TestPushKilledBeforeItsAckIsStoredOrUnacked(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("SIGKILL")
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	const pushes, killAfter = 400, 50
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
		}
		cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "listening ") {
		t.Fatalf("child: %q %v", line, err)
	}
	addr := strings.TrimSpace(strings.TrimPrefix(line, "listening "))
	k, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	dev := newDevice(t)
	p := pushSession(t, addr, k.Public)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for i := range pushes {
			ct, err := p.send.Encrypt(nil, nil, AppendFrame(nil, Push, append(append([]byte(nil), dev.Public...), fmt.Sprintf("blob-%04d", i)...)))
			if err != nil {
				return
			}
			if _, err := p.c.Write(appendMessage(nil, ct)); err != nil {
				return // the relay is gone
			}
		}
	}()
	acked := 0
	var ended error
	for {
		typ, _, err := p.read()
		if err != nil {
			ended = err
			break
		}
		if typ != Ack {
			t.Fatalf("answer %d is %v", acked, typ)
		}
		acked++
		if acked == killAfter {
			cmd.Process.Kill()
			killed = true
		}
	}
	p.c.Close()
	<-wrote
	if !killed { // the session ended before killAfter acks: the child still serves, and Wait would never return
		cmd.Process.Kill()
		killed = true
	}
	cmd.Wait()
	if acked < killAfter {
		t.Fatalf("only %d acks before the session ended (%v)", acked, ended)
	}

	st, err := relay.Open(filepath.Join(dir, "relay"), relay.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	in := st.Inbox(DeviceID(dev.Public))
	if in.Blobs < acked {
		t.Fatalf("%d blobs stored, %d acked", in.Blobs, acked)
	}
	sess, err := st.Session(DeviceID(dev.Public))
	if err != nil {
		t.Fatal(err)
	}
	for i := range acked {
		b, err := sess.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("blob-%04d", i); string(b.Data) != want {
			t.Fatalf("blob %d is %q, want %q", i, b.Data, want)
		}
	}
	t.Logf("%d pushes acked before the kill, %d stored", acked, in.Blobs)
}
