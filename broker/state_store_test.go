package broker

// The glue to package statestore: the broker does not start on a store it
// cannot trust, and a store written through the broker's write path loads
// again (statestore's own tests cover the checks).

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"busbar/state"
	"busbar/statestore"
)

// anyNamespace lets a test read every namespace, as an in-process node may.
func anyNamespace(string) bool { return true }

func TestStateStoreUntrustedStopsTheBrokerFromStarting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{StatePath: path})
	if !errors.Is(err, ErrStoreUntrusted) || !errors.Is(err, statestore.ErrUntrusted) {
		t.Fatalf("New on an empty store file: %v", err)
	}
	for _, want := range []string{path, "empty", "The broker does not start on it", "move the file aside"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if fi, _ := os.Stat(path); fi.Size() != 0 {
		t.Fatalf("the refused file was changed: %d bytes", fi.Size())
	}
}

// TestStateStoreHoldsWhatTheBrokerWrote: writes, an open key written by
// another node, a delete and a drop, through the broker, are what the
// next broker on the same file holds.
func TestStateStoreHoldsWhatTheBrokerWrote(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	b, err := New(Options{StatePath: path})
	if err != nil {
		t.Fatal(err)
	}
	thermostat, phone := &conn{endpoint: endpoint{node: "thermostat"}}, &conn{endpoint: endpoint{node: "phone"}}
	write := func(c *conn, d state.Delta, open bool) {
		t.Helper()
		if r, no := b.stateWrite(c, d, open); no != nil || !r.Applied {
			t.Fatalf("write %s %s/%s: %+v %v", c.node, d.NS, d.Key, r, no)
		}
	}
	write(thermostat, state.Delta{NS: "home", Key: "target", Value: json.RawMessage(`20.5`), Version: 1}, false)
	write(thermostat, state.Delta{NS: "home", Key: "mode", Value: json.RawMessage(`"eco"`), Version: 2}, false)
	write(thermostat, state.Delta{NS: "home", Key: "target"}, true)
	write(phone, state.Delta{NS: "home", Key: "target", Value: json.RawMessage(`22`), Version: 5}, false)
	write(thermostat, state.Delta{NS: "home", Key: "mode", Version: 3, Deleted: true}, false)
	write(phone, state.Delta{NS: "phone.prefs", Key: "theme", Value: json.RawMessage(`"dark"`), Version: 1}, false)
	if no := b.state.drop("phone.prefs", alone{}); no != nil {
		t.Fatal(no)
	}
	want, _ := b.state.get(state.Query{}, anyNamespace)
	if err := b.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	b, err = New(Options{StatePath: path})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Shutdown(t.Context()) }()
	got, _ := b.state.get(state.Query{}, anyNamespace)
	if !reflect.DeepEqual(got, want) || len(got.([]state.Snapshot)) != 1 {
		t.Fatalf("after a restart: %+v\nwant %+v", got, want)
	}
}
