package cli

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"busbar/internal/testbroker"
	"busbar/internal/testnats"
)

// Two devices of one user, each a directory, through the real binary and
// a real `busbar serve`: one creates a group and invites, the other joins
// and listens until the manifest arrives, and then each `durable send`,
// run while the other's `durable listen` keeps running on the same device,
// reaches the other's listener.
func TestDurableSendAndListenBetweenTwoDevices(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	durableBetweenTwoDevices(t, s, s)
}

// The same with each device on its own broker of a bus, the inboxes kept
// by b1 (--nats-relays): the phone's pushes, sessions and acks go through
// b2 to its inbox's home.
func TestDurableSendAndListenAcrossBrokers(t *testing.T) {
	nats := testnats.Start(t, 3)
	bus := []string{"--nats-heartbeat", "100ms", "--nats-lease", "3s", "--nats-relays", "b1"}
	b1 := startServe(t, filepath.Join(t.TempDir(), "b1"), append([]string{"--name", "b1", "--nats", nats.URL(0)}, bus...)...)
	b2 := startServe(t, filepath.Join(t.TempDir(), "b2"), append([]string{"--name", "b2", "--nats", nats.URL(1)}, bus...)...)
	b1.background(t, "sub", "news", "--name", "on-b1")
	testbroker.AwaitEvery(t, 20*time.Second, 100*time.Millisecond, "b2 to know b1", func() error {
		if code, out, _ := b2.busbar(t, "", "ls"); code != 0 || !strings.Contains(out, "on-b1") {
			return fmt.Errorf("b2 lists %s", out)
		}
		return nil
	})
	durableBetweenTwoDevices(t, b1, b2)
}

// durableBetweenTwoDevices runs the laptop's commands against server l,
// the phone's against p.
func durableBetweenTwoDevices(t *testing.T, l, p *server) {
	laptop, phone := filepath.Join(t.TempDir(), "laptop"), filepath.Join(t.TempDir(), "phone")
	env, penv := []string{"BUSBAR_DATA=" + l.data}, []string{"BUSBAR_DATA=" + p.data}
	if code, _, errOut := busbar(t, env, "group", "create", "home", "--device", laptop); code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	// Alone in the group, a send is accepted and goes nowhere: the user hears so.
	if code, out, errOut := busbar(t, env, "durable", "send", "home", "to nobody", "--device", laptop); code != 0 || len(strings.TrimSpace(out)) != 32 ||
		!strings.Contains(errOut, "home has no other members yet") {
		t.Fatalf("a send with no other member: exit %d, %q %q", code, out, errOut)
	}
	_, tok, _ := busbar(t, env, "group", "invite", "home", "--device", laptop)
	if code, _, errOut := busbar(t, penv, "group", "join", strings.TrimSpace(tok), "--device", phone); code != 0 {
		t.Fatalf("join: %d %s", code, errOut)
	}
	if code, _, errOut := busbar(t, penv, "durable", "send", "home", "too early", "--device", phone); code != exitRejected || !strings.Contains(errOut, "the join is pending") {
		t.Fatalf("a send before the manifest: exit %d, %q", code, errOut)
	}
	atLaptop, laptopDone := l.background(t, "durable", "listen", "home", "--device", laptop, "--count", "1")
	atPhone, phoneDone := p.background(t, "durable", "listen", "home", "--device", phone, "--count", "1", "--json")
	testbroker.Eventually(t, 20*time.Second, "the phone holds the group's manifest", func() bool {
		code, out, _ := busbar(t, penv, "group", "show", "home", "--device", phone, "--json")
		var v groupView
		return code == 0 && json.Unmarshal([]byte(out), &v) == nil && v.Epoch == 2 && v.Member
	})
	code, idOut, errOut := busbar(t, penv, "durable", "send", "home", "hello from the phone", "--device", phone)
	if code != 0 || len(strings.TrimSpace(idOut)) != 32 {
		t.Fatalf("phone send: exit %d, %q %q", code, idOut, errOut)
	}
	if code, _, errOut := busbar(t, env, "durable", "send", "home", "hello from the laptop", "--device", laptop); code != 0 {
		t.Fatalf("laptop send: exit %d, %q", code, errOut)
	}
	if err := laptopDone(); err != nil {
		t.Fatalf("laptop listen: %v\n%s", err, atLaptop)
	}
	if err := phoneDone(); err != nil {
		t.Fatalf("phone listen: %v\n%s", err, atPhone)
	}
	if got := atLaptop.String(); !strings.HasPrefix(got, strings.TrimSpace(idOut)+" ") || !strings.Contains(got, " hello from the phone\n") {
		t.Fatalf("the laptop printed %q", got)
	}
	var line listenLine
	if err := json.Unmarshal([]byte(atPhone.String()), &line); err != nil || line.Body != "hello from the laptop" || line.Group != "home" {
		t.Fatalf("the phone printed %q (%v)", atPhone.String(), err)
	}
	for dev, env := range map[string][]string{laptop: env, phone: penv} {
		code, out, _ := busbar(t, env, "durable", "status", "--device", dev, "--json")
		var st struct {
			Outbox, Held int
			Pending      *int                 `json:"pending_manifests"`
			RelayInbox   *struct{ Blobs int } `json:"relay_inbox"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Outbox != 0 || st.Held != 0 || st.Pending == nil || *st.Pending != 0 ||
			st.RelayInbox == nil {
			t.Fatalf("%s status: exit %d %q", dev, code, out)
		}
	}
	// Each message was handled once: a second push of one entry (its
	// send and the running listen of the same device may both push it,
	// which the contract allows) may still wait in the inbox, but the
	// recipient's dedup drops it, so the next thing each listener handles
	// is the next message sent.
	for _, next := range []struct {
		from, to   string
		fenv, tenv []string
	}{{laptop, phone, env, penv}, {phone, laptop, penv, env}} {
		id, _ := sendDurable(t, next.fenv, next.from, "next")
		code, out, errOut := busbar(t, next.tenv, "durable", "listen", "home", "--device", next.to, "--count", "1", "--json")
		var line listenLine
		if code != 0 || json.Unmarshal([]byte(out), &line) != nil || line.ID != id || line.Body != "next" {
			t.Fatalf("the next listen of %s: exit %d, %q %q; want only message %s", next.to, code, out, errOut, id)
		}
	}
}

// The device verbs with no device yet, or bad arguments, say so.
func TestDeviceVerbsRefuseWithoutADevice(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "none")
	if code, _, errOut := run(t, "", "durable", "status", "--device", dir); code != exitFail || !strings.Contains(errOut, "busbar id init") {
		t.Fatalf("status without a device: %d %q", code, errOut)
	}
	if code, _, _ := run(t, "", "durable", "frobnicate"); code != exitUsage {
		t.Fatalf("an unknown durable operation: %d", code)
	}
	if code, _, _ := run(t, "", "id"); code != exitUsage {
		t.Fatalf("id without an operation: %d", code)
	}
	code, out, _ := run(t, "", "id", "init", "--device", dir)
	again, out2, errOut := run(t, "", "id", "init", "--device", dir)
	if code != 0 || again != 0 || out != out2 || len(strings.TrimSpace(out)) != 32 || !strings.Contains(errOut, "already holds a device") {
		t.Fatalf("id init twice: %d %q, %d %q %q", code, out, again, out2, errOut)
	}
}
