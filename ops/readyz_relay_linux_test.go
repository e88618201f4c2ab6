//go:build linux

package ops_test

// /readyz while the relay's disk is full: not ready as soon as a push
// fails to be written, ready again, with no restart, once there is room.
// The disk is a small tmpfs, mounted for the test (root only; skipped
// otherwise).

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/ops"
	"busbar/relay"
	"busbar/seal"
	"busbar/wire"
)

// smallDisk mounts a tmpfs of size bytes for the test, or skips.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
	return dir
}

// fill writes a file in dir until the disk is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return path
		}
	}
}

func TestReadyzIsNotReadyWhileTheRelayCannotWrite(t *testing.T) {
	disk := smallDisk(t, 256<<10)
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: filepath.Join(disk, "relay"), Relay: relay.Options{RetryInterval: 10 * time.Millisecond}})
	srv := opsServer(t, e, "")
	author, to := mustIdentity(t), mustIdentity(t)
	msg, err := seal.NewMessage(seal.KindSync, "g", []byte(strings.Repeat("x", 1000)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	blob, err := seal.Seal(author, to.Public(), msg)
	if err != nil {
		t.Fatal(err)
	}
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "sender", "local", e.Secrets["local"])
	n := 0
	push := func() *wire.Message {
		n++
		id := fmt.Sprint("p", n)
		r.Send(t, wire.New(wire.TypeRequest, wire.CmdDurablePush).WithHeader(wire.HeaderID, id).WithBody(blob))
		for {
			if m := r.Read(t); m.Value(wire.HeaderReplyTo) == id {
				return m
			}
		}
	}
	if m := push(); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("a push with room: %v", m)
	}
	if code, _, _ := get(t, srv, ops.ReadyPath, "Bearer "+testToken); code != 200 {
		t.Fatalf("readyz with room: %d", code)
	}
	filler := fill(t, disk)
	for i := 0; ; i++ { // what was left of the segment's last page takes a few more
		m := push()
		if m.Value(wire.HeaderRC) == "0" {
			if i > 100 {
				t.Fatal("pushes still stored on a full disk")
			}
			continue
		}
		if m.Value(wire.HeaderResult) != string(wire.ResultInternal) {
			t.Fatalf("a push on a full disk: %v", m)
		}
		break
	}
	code, body, _ := get(t, srv, ops.ReadyPath, "Bearer "+testToken)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "relay") {
		t.Fatalf("readyz while the relay cannot write: %d %q", code, body)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 10*time.Second, "ready again once there is room", func() bool {
		code, _, _ := get(t, srv, ops.ReadyPath, "Bearer "+testToken)
		return code == 200
	})
	if m := push(); m.Value(wire.HeaderRC) != "0" {
		t.Fatalf("a push once there is room again: %v", m)
	}
}

func mustIdentity(t *testing.T) *seal.Identity {
	t.Helper()
	id, err := seal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return id
}
