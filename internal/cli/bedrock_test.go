package cli

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"busbar/bedrock"
	"busbar/internal/testbroker"
)

// TestBedrockBridgeEndToEnd: a Go add-on on a line medium (the bridge
// child's stdin and stdout), `busbar serve`, and `busbar bedrock bridge`
// between them. A busbar client calls the add-on's method by its bare
// name and reads the add-on's state, and the add-on calls a busbar
// service, all through the real binaries.
func TestBedrockBridgeEndToEnd(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	s.background(t, "reply", "greet", "--exec", "sed 's/^/hello /'", "--name", "greeter")

	cmd := exec.Command(binPath, "bedrock", "bridge", "--medium", "stdio", "--name", "bridge", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "BUSBAR_DATA="+s.data)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	toBridge, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	fromBridge, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("bridge stderr:\n%s", stderr.String())
		}
	})

	// The add-on: id "door", a method, a namespace of its own.
	clock := bedrock.NewRealClock()
	defer clock.Close()
	lines := bedrock.NewLineMedium(fromBridge, toBridge)
	bus, err := bedrock.New(bedrock.Options{SelfID: "door", Medium: lines, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	rpc := bedrock.NewRPC(bus)
	rpc.Handle("open", func(params json.RawMessage, from *bedrock.Envelope) (any, error) {
		var p struct {
			Who string `json:"who"`
		}
		if err := json.Unmarshal(params, &p); err != nil || p.Who == "" {
			return nil, errors.New("who is asking?")
		}
		return map[string]string{"door": "open", "for": p.Who}, nil
	})
	st := bedrock.NewState(bus, bedrock.StateOptions{})
	bus.Start()
	defer bus.Stop()
	disc := bedrock.NewDiscovery(bus, bedrock.AnnounceData{Version: "2.0.0", SchemaVersion: 1}, nil)
	defer disc.Close()
	if err := st.Own("door"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Set("door", "position", json.RawMessage(`"closed"`)); err != nil {
		t.Fatal(err)
	}

	// The add-on appears in the registry.
	testbroker.Eventually(t, 15*time.Second, "door in the registry", func() bool {
		code, out, _ := s.busbar(t, "", "ls", "--services", "--json")
		return code == 0 && strings.Contains(out, `"address":"door.bridge.bus"`) && strings.Contains(out, `"version":"2.0.0"`)
	})
	// busbar → add-on, by bare name.
	code, out, errOut := s.busbar(t, "", "req", "door", "bedrock.call", `{"method":"open","params":{"who":"alice"}}`)
	if code != 0 || !strings.Contains(out, `"door":"open"`) || !strings.Contains(out, `"for":"alice"`) {
		t.Fatalf("call: exit %d %q %s", code, out, errOut)
	}
	if code, _, errOut := s.busbar(t, "", "req", "door", "bedrock.call", `{"method":"open"}`); code != exitHandler || !strings.Contains(errOut, "who is asking?") {
		t.Fatalf("failing method: exit %d %s", code, errOut)
	}
	if code, _, errOut := s.busbar(t, "", "req", "door", "bedrock.call", `{"method":"fly"}`); code != exitHandler || !strings.Contains(errOut, "unknown method 'fly'") {
		t.Fatalf("unknown method: exit %d %s", code, errOut)
	}
	// The add-on's state, through the broker.
	testbroker.Eventually(t, 15*time.Second, "the add-on's state in busbar", func() bool {
		code, out, _ := s.busbar(t, "", "state", "get", "bedrock.door", "position")
		return code == 0 && strings.Contains(out, `"v":"closed"`)
	})
	if _, err := st.Set("door", "position", json.RawMessage(`"ajar"`)); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 15*time.Second, "the change in busbar", func() bool {
		code, out, _ := s.busbar(t, "", "state", "get", "bedrock.door", "position")
		return code == 0 && strings.Contains(out, `"v":"ajar"`)
	})
	// add-on → busbar: a request to a busbar service through the bridge.
	var reply json.RawMessage
	testbroker.Eventually(t, 15*time.Second, "the add-on's call to busbar", func() bool {
		done := make(chan struct{})
		var res bedrock.Response
		var rerr error
		rpc.Go("bedrock-bridge", "busbar.request", map[string]string{"target": "greeter", "channel": "greet", "payload": "door"}, 0, func(r bedrock.Response, err error) {
			res, rerr = r, err
			close(done)
		})
		<-done
		reply = res.Data
		return rerr == nil && res.OK
	})
	var greeting string
	if json.Unmarshal(reply, &greeting) != nil || strings.TrimSpace(greeting) != "hello door" {
		t.Fatalf("greeting %s", reply)
	}
}
