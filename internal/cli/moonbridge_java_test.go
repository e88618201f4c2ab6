package cli

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"busbar/internal/testbroker"
)

// javaProbe is a MoonBridge backend of busbar's own, plain JDK, compiled
// for Java 8 (docs/moonbridge.md#the-java-probe).
const javaProbe = "../../edge/moonbridge/testdata/java/MoonBridgeProbe.java"

// compileJava compiles the probe with javac --release 8, or skips when
// there is no JDK (CI sets BUSBAR_REQUIRE_JAVA, and installs one).
func compileJava(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("javac"); err != nil {
		if os.Getenv("BUSBAR_REQUIRE_JAVA") != "" {
			t.Fatal("no javac installed, and BUSBAR_REQUIRE_JAVA is set")
		}
		t.Skip("no javac: install a JDK (apt-get install default-jdk-headless) to run the Java 8 MoonBridge probe")
	}
	dir := t.TempDir()
	if out, err := exec.Command("javac", "--release", "8", "-d", dir, javaProbe).CombinedOutput(); err != nil {
		t.Fatalf("javac --release 8: %v\n%s", err, out)
	}
	return dir
}

// TestJavaMoonBridgeProbe: a Java 8 backend registers with `busbar serve
// --moonbridge` with its HMAC, sends, requests and publishes to nodes the
// CLI runs, and answers `busbar req` and `busbar send`. It proves the
// bytes from a JVM.
func TestJavaMoonBridgeProbe(t *testing.T) {
	classes := compileJava(t)
	data := filepath.Join(t.TempDir(), "state")
	s := startServe(t, data, "--moonbridge", "127.0.0.1:0")
	addr := regexp.MustCompile(`busbar: moonbridge backends on (\S+) `).FindStringSubmatch(s.banner)[1]
	code, out, errOut := s.busbar(t, "", "principal", "add", "island-j", "--moonbridge", "--nodes", "island-j",
		"--send", "mb:*", "--request", "mb:*", "--publish", "mb:*", "--subscribe", "mb:*", "--handle", "mb:ask")
	if code != 0 {
		t.Fatalf("principal add: %s", errOut)
	}
	secret := regexp.MustCompile(`(?m)^secret: "([^"]+)"$`).FindStringSubmatch(out)[1]
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The key is in force once a registration with it is taken (the
	// probe registers the same instance again: it takes over).
	testbroker.AwaitEvery(t, 10*time.Second, 50*time.Millisecond, "the key to be in force", func() error {
		_, err := dialMoonBridge(t, addr, "island-j", "island-j", secret)
		return err
	})
	sub, subDone := s.background(t, "sub", "mb:news", "--name", "listener", "--count", "2")
	_, replyDone := s.background(t, "reply", "mb:ask", "--echo", "--name", "answerer", "--count", "1")
	s.waitLs(t, "the listener", hasNode("listener", "subscriptions", "mb:news"))
	s.waitLs(t, "the answerer", hasNode("answerer", "handlers", "mb:ask"))

	_, port, _ := strings.Cut(addr, ":")
	java := exec.Command("java", "-cp", classes, "MoonBridgeProbe", "127.0.0.1", port, "island-j", "island-j", secret)
	stdout, err := java.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	java.Stderr = &stderr
	if err := java.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- java.Wait()
	}()
	t.Cleanup(func() {
		_ = java.Process.Kill()
		for range lines {
		}
		<-exited
	})
	next := func(want string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok || !strings.Contains(l, want) {
				t.Fatalf("java printed %q, want %q; stderr:\n%s", l, want, stderr.String())
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("java printed nothing while %q was due; stderr:\n%s", want, stderr.String())
		}
		return ""
	}
	next("REGISTERED epoch=")
	next("SEND ACCEPTED")
	next("REPLY q from backend(answerer)")
	next("ERROR NOT_CONNECTED nobody is not connected") // MoonBridge's code for a backend that is not there
	pub := next("PUBLISH {")
	for _, r := range []string{"backend(listener)=ACCEPTED", "backend(island-j)=NO_SUBSCRIBER", "proxy=NO_SUBSCRIBER"} {
		if !strings.Contains(pub, r) {
			t.Fatalf("publish results lack %s: %s", r, pub)
		}
	}
	next("READY")
	if code, out, errOut := s.busbar(t, "", "req", "island-j", "mb:ask", "hello"); code != 0 || strings.TrimSpace(out) != "java:hello" {
		t.Fatalf("busbar req: exit %d %q %s", code, out, errOut)
	}
	next("ANSWERED hello from backend(cli-")
	if code, out, errOut := s.busbar(t, "", "send", "island-j", "mb:news", "hi"); code != 0 || !strings.HasPrefix(out, "ACCEPTED") {
		t.Fatalf("busbar send: exit %d %q %s", code, out, errOut)
	}
	next("EVENT hi from backend(cli-")
	next("PONG")
	select {
	case <-lines:
	case <-time.After(30 * time.Second):
	}
	if err := <-exited; err != nil {
		t.Fatalf("java: %v\n%s", err, stderr.String())
	}
	exited <- nil
	if err := subDone(); err != nil || !strings.Contains(sub.String(), "from-java") || !strings.Contains(sub.String(), "pub-java") {
		t.Fatalf("busbar sub: %v\n%s", err, sub)
	}
	if err := replyDone(); err != nil {
		t.Fatal(err)
	}
}
