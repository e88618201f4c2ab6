package cli

// `busbar group` through the built binary: on a device directory alone,
// and a join over a real `busbar serve` relay.

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/durable"
	"busbar/seal"
)

// busbar runs the binary with env added to the environment.
func busbar(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runEnv(t, env, "", args...)
}

func TestGroupVerbs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	env := []string{"BUSBAR_DEVICE=" + dir}
	code, out, errOut := busbar(t, env, "group", "create", "home", "--label", "laptop a")
	if code != 0 || !strings.HasPrefix(out, "group home created: epoch 1, device ") {
		t.Fatalf("create: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	self := strings.TrimSpace(strings.TrimPrefix(out, "group home created: epoch 1, device "))
	if code, _, errOut := busbar(t, env, "group", "create", "home"); code != 1 || !strings.Contains(errOut, "exists") {
		t.Fatalf("create again: exit %d, stderr %q", code, errOut)
	}

	code, out, errOut = busbar(t, env, "group", "show", "home", "--json")
	var v groupView
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		t.Fatalf("show: exit %d, %v, stdout %q, stderr %q", code, err, out, errOut)
	}
	want := groupView{Group: "home", Epoch: 1, Signer: self, Self: self, Member: true, Members: []memberView{{ID: self, Label: "laptop a"}}}
	if gb, wb := mustJSON(t, v), mustJSON(t, want); gb != wb {
		t.Fatalf("show --json = %s, want %s", gb, wb)
	}
	code, out, _ = busbar(t, nil, "group", "show", "home", "--device", dir)
	if code != 0 || !strings.Contains(out, "group home, epoch 1, 1 members") || !strings.Contains(out, self+"  laptop a  (this device)") {
		t.Fatalf("show: exit %d\n%s", code, out)
	}

	code, out, errOut = busbar(t, env, "group", "invite", "home", "--ttl", "2h")
	if code != 0 {
		t.Fatalf("invite: exit %d, stderr %q", code, errOut)
	}
	tok, err := seal.ParseToken(out)
	if err != nil || tok.Group() != "home" || tok.Inviter().ID().String() != self || strings.Count(out, "\n") != 1 {
		t.Fatalf("invite printed %q: %v", out, err)
	}
	if d := time.Until(tok.Expires()); d < 119*time.Minute || d > 2*time.Hour {
		t.Fatalf("expires in %v", d)
	}

	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"group"}, 2, "busbar group: missing subcommand (create, invite, join, show, leave or revoke)\n"},
		{[]string{"group", "nope"}, 2, `busbar group: unknown subcommand "nope"` + "\n"},
		{[]string{"group", "create"}, 2, "busbar group create: missing NAME\n"},
		{[]string{"group", "create", "not/a/name"}, 2, "is not a group name"},
		{[]string{"group", "invite", "home", "--ttl", "10s"}, 2, "--ttl 10s"},
		{[]string{"group", "revoke", "home", "nobody"}, 2, `device "nobody"`},
		{[]string{"group", "show", "other"}, 1, "holds no group other"},
		{[]string{"group", "invite", "home", "--device", filepath.Join(t.TempDir(), "none")}, 1, "no device here"},
	} {
		code, out, errOut := busbar(t, env, c.args...)
		if code != c.code || out != "" || !strings.Contains(errOut, c.err) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", c.args, code, out, errOut)
		}
	}
	if code, out, _ := busbar(t, env, "group", "help"); code != 0 || !strings.Contains(out, "revoke") {
		t.Fatalf("group help: exit %d %q", code, out)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A joins B over a real relay: `group join` queues the Pair and pushes it;
// the inviter's receiving side (here the library, in the test process, as
// `busbar durable listen` runs it) accepts it and sends the manifest,
// which the joiner's receiving side installs.
func TestGroupJoinOverRelay(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "state"))
	devA, devB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	env := []string{"BUSBAR_DATA=" + s.data}
	if code, _, errOut := busbar(t, env, "group", "create", "home", "--device", devA, "--label", "a"); code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	code, tok, errOut := busbar(t, env, "group", "invite", "home", "--device", devA)
	if code != 0 {
		t.Fatalf("invite: %d %s", code, errOut)
	}
	code, out, errOut := busbar(t, env, "group", "join", strings.TrimSpace(tok), "--device", devB, "--label", "b")
	if code != 0 || !strings.HasPrefix(out, "joining home: device ") || errOut != "" {
		t.Fatalf("join: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = busbar(t, env, "group", "show", "home", "--device", devB, "--json")
	var v groupView
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || !v.Pending || v.Member {
		t.Fatalf("show before the manifest: exit %d %q", code, out)
	}

	receive(t, s.data, devA) // takes the Pair, queues the manifest
	receive(t, s.data, devB) // takes the manifest
	for _, dev := range []string{devA, devB} {
		code, out, _ := busbar(t, env, "group", "show", "home", "--device", dev, "--json")
		var v groupView
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Epoch != 2 || len(v.Members) != 2 || !v.Member {
			t.Fatalf("%s: show: exit %d %q", dev, code, out)
		}
	}
}

// receive runs the device at dir against the relay of the broker whose
// data directory is data: one receive session until the inbox is quiet,
// then a flush.
func receive(t *testing.T, data, dir string) {
	t.Helper()
	cred, err := auth.LoadCredential(filepath.Join(data, auth.CredentialsFile))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, client.Options{Server: "unix://" + filepath.Join(data, socketName), Node: "group-test", Credential: cred})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := durable.Open(dir, durable.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r := durable.NewClientRelay(c)
	stop, err := d.OnMessage(func(context.Context, durable.Message) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	rctx, rcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer rcancel()
	if err := d.Run(rctx, r); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v", err)
	}
	if _, err := d.Flush(ctx, r); err != nil {
		t.Fatal(err)
	}
	if evs, _, _ := d.TakeEvents(); len(evs) != 0 {
		t.Fatalf("events %+v", evs)
	}
}
