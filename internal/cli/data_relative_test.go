package cli

// A relative --data or BUSBAR_DATA is taken against the working
// directory: serve starts, and the client verbs reach it.

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRelativeDataDirectoryIsMadeAbsolute(t *testing.T) {
	cwd := t.TempDir()
	serve := exec.Command(binPath, "serve", "--data", "rel/state", "--tcp", "127.0.0.1:0", "--http", "off", "--log-level", "warn")
	serve.Dir = cwd
	var stderr syncBuffer
	serve.Stderr = &stderr
	out, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	ready := make(chan string, 1)
	go func() { // owned by the test: ends when serve exits
		sc := bufio.NewScanner(out)
		var lines []string
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.HasPrefix(sc.Text(), "busbar: listening on tcp://") {
				ready <- strings.Join(lines, "\n")
			}
		}
		exited <- serve.Wait()
	}()
	t.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = serve.Process.Kill()
			<-exited
		}
	})
	abs := filepath.Join(cwd, "rel", "state")
	select {
	case banner := <-ready:
		if !strings.Contains(banner, abs) {
			t.Fatalf("serve did not print the absolute data directory %s:\n%s", abs, banner)
		}
	case err := <-exited:
		t.Fatalf("serve with a relative --data exited: %v\n%s", err, stderr.String())
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not start:\n%s", stderr.String())
	}
	for _, how := range [][]string{
		{"BUSBAR_DATA=rel/state"},               // relative in the environment
		{"BUSBAR_DATA=", "--data", "rel/state"}, // relative as a flag
	} {
		env, args := how[:1], append([]string{"ls"}, how[1:]...)
		ls := exec.Command(binPath, args...)
		ls.Dir = cwd
		ls.Env = append(os.Environ(), env...)
		b, err := ls.CombinedOutput()
		if err != nil {
			t.Fatalf("busbar %v with %v: %v\n%s", args, env, err, b)
		}
	}
}
