package bridge

// Bedrock state through the bridge with add-ons that behave as the
// JavaScript ones do (package jsreplica): an add-on's first write, writes
// to another add-on's namespace, and writes to a namespace busbar exports.

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"busbar/bedrock/internal/jsreplica"
	"busbar/client"
	"busbar/internal/testbroker"
)

// busbarValue reads a key of a busbar namespace ("" when absent).
func busbarValue(t *testing.T, c *client.Client, ns, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, found, err := c.State(ns).Get(ctx, key)
	if err != nil || !found || e.Deleted {
		return ""
	}
	return string(e.Value)
}

// TestFirstWriteOfAnEmptyAddonReachesBusbar: an add-on that starts with
// empty state announces no snapshot; its first write is a delta of a
// namespace the bridge has never heard of. The bridge takes it at once,
// so it reaches busbar even though the add-on leaves right after (a
// resync would find no one to ask).
func TestFirstWriteOfAnEmptyAddonReachesBusbar(t *testing.T) {
	w := newWorld(t, Options{}, nil)
	bus := w.addon(t, "lamp")
	lamp := jsreplica.New(bus, jsreplica.Options{})
	lamp.Start()
	if err := lamp.Set("lamp", "on", json.RawMessage(`true`)); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "the delta to leave the add-on", func() bool { return bus.QueueSize() == 0 })
	lamp.Stop()
	bus.Stop()
	reader := connect(t, w.b, "reader")
	testbroker.Eventually(t, 10*time.Second, "the first write in busbar", func() bool {
		return busbarValue(t, reader, StatePrefix+"lamp", "on") == "true"
	})
}

// TestWriteToAnotherAddonsNamespace: the JavaScript replicas take a write
// to a namespace from any add-on, so busbar's mirror holds it too.
func TestWriteToAnotherAddonsNamespace(t *testing.T) {
	w := newWorld(t, Options{}, nil)
	door := jsreplica.New(w.addon(t, "door"), jsreplica.Options{})
	door.Start()
	kid := jsreplica.New(w.addon(t, "kid"), jsreplica.Options{})
	kid.Start()
	if err := door.Set("door", "position", json.RawMessage(`"closed"`)); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "kid to hear the door", func() bool {
		_, ok := kid.Get("door", "position")
		return ok
	})
	if err := kid.Set("door", "position", json.RawMessage(`"open"`)); err != nil {
		t.Fatal(err)
	}
	reader := connect(t, w.b, "reader")
	testbroker.Eventually(t, 10*time.Second, "kid's write in busbar and at the door", func() bool {
		e, _ := door.Get("door", "position")
		return string(e.Value) == `"open"` && e.Src == "kid" &&
			busbarValue(t, reader, StatePrefix+"door", "position") == `"open"`
	})
}

// TestWriteToAnExportedNamespaceIsUndone: a namespace busbar exports keeps
// busbar's rule (only its owner writes it). An add-on's write to it is
// applied by the JavaScript replicas, so the bridge writes busbar's entry
// again, and every replica holds busbar's value; busbar is untouched. A
// write of busbar's own value is left alone.
func TestWriteToAnExportedNamespaceIsUndone(t *testing.T) {
	w, owner := exportingWorld(t)
	kid := jsreplica.New(w.addon(t, "kid"), jsreplica.Options{})
	kid.Start()
	watcher := jsreplica.New(w.addon(t, "watcher"), jsreplica.Options{})
	watcher.Start()
	testbroker.Eventually(t, 10*time.Second, "the exported namespace on the medium", func() bool {
		e, _ := kid.Get("settings", "volume")
		f, _ := watcher.Get("settings", "volume")
		return string(e.Value) == "7" && string(f.Value) == "7"
	})
	// busbar's own value, written by an add-on, is left alone (as another
	// bridge's would be); the undo of "extra", queued after it, marks
	// when the bridge has dealt with both.
	if err := kid.Set("settings", "volume", json.RawMessage(`7`)); err != nil {
		t.Fatal(err)
	}
	if err := kid.Set("settings", "extra", json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 10*time.Second, "the new key undone on every replica", func() bool {
		for _, r := range []*jsreplica.Replica{kid, watcher} {
			if x, _ := r.Get("settings", "extra"); !x.Del || x.Src != ServiceName {
				return false
			}
		}
		return true
	})
	if v, _ := watcher.Get("settings", "volume"); string(v.Value) != "7" || v.Src != "kid" {
		t.Fatalf("busbar's value written by kid was rewritten: %+v", v)
	}
	if err := kid.Set("settings", "volume", json.RawMessage(`99`)); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 10*time.Second, "busbar's value back on every replica", func() bool {
		for _, r := range []*jsreplica.Replica{kid, watcher} {
			if v, _ := r.Get("settings", "volume"); string(v.Value) != "7" || v.Src != ServiceName {
				return false
			}
		}
		return true
	})
	if v := busbarValue(t, owner, "settings", "volume"); v != "7" {
		t.Fatalf("busbar's settings.volume is %s", v)
	}
	if v := busbarValue(t, owner, "settings", "extra"); v != "" {
		t.Fatalf("busbar's settings.extra is %s", v)
	}
}
