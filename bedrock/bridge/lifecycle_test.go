package bridge

// What a bridge leaves on the caller's client: nothing after Close, and no
// registration per message while it runs.

import (
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"busbar/bedrock"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
)

// TestCloseReleasesTheClient: Close stops the bridge but the client stays
// the caller's, so the bridge's registrations on it (the bedrock.call
// handler, the add-ons announced as services) go with the bridge, and a
// new bridge on the same client starts.
// (They stayed: the add-ons remained services and a second bridge could
// not handle bedrock.call.)
func TestCloseReleasesTheClient(t *testing.T) {
	b, err := broker.New(broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	clock := bedrock.NewRealClock()
	t.Cleanup(clock.Close)
	wd := bedrock.NewWorld(clock, bedrock.WorldOptions{})
	t.Cleanup(wd.Close)
	c := connect(t, b, "bridge")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	start := func() *Bridge {
		bus, _ := bedrock.New(bedrock.Options{SelfID: ServiceName, Medium: wd, Clock: clock})
		br, err := New(ctx, Options{Client: c, Bus: bus})
		if err != nil {
			t.Fatalf("new bridge: %v", err)
		}
		return br
	}
	br := start()
	lamp, _ := bedrock.New(bedrock.Options{SelfID: "lamp", Medium: wd, Clock: clock})
	lamp.Start()
	defer lamp.Stop()
	d := bedrock.NewDiscovery(lamp, bedrock.AnnounceData{Version: "1"}, nil)
	defer d.Close()
	caller := connect(t, b, "caller")
	testbroker.Eventually(t, 5*time.Second, "lamp in the registry", func() bool {
		list, err := caller.Whois(ctx, "lamp")
		return err == nil && len(list) == 1
	})
	br.Close()
	if list, err := caller.Whois(ctx, "lamp"); err == nil && len(list) != 0 {
		t.Errorf("after Close, lamp is still a service: %+v", list)
	}
	br2 := start()
	br2.Close()
}

// TestImportedEventsLeaveNoScope: importing bedrock events onto busbar
// does not leave a Scope registered on the client for each message.
// (Every imported event, and every add-on busbar.request, used to open a
// Scope that lived as long as the client.)
func TestImportedEventsLeaveNoScope(t *testing.T) {
	w := newWorld(t, Options{}, nil)
	cv := reflect.ValueOf(w.bridge.c).Elem()
	mu := (*sync.Mutex)(unsafe.Pointer(cv.FieldByName("mu").UnsafeAddr()))
	scopes := func() int { // client.Client.scopes, under client.Client.mu
		mu.Lock()
		defer mu.Unlock()
		return cv.FieldByName("scopes").Len()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var imported atomic.Int64
	watcher := connect(t, w.b, "watcher")
	if _, err := watcher.Scope("s").Channel(EventPrefix+"motion").Subscribe(ctx, func(context.Context, *client.Message) { imported.Add(1) }); err != nil {
		t.Fatal(err)
	}
	lamp := w.addon(t, "lamp")
	motion := func(i int) {
		lamp.Send(bedrock.SendOptions{Type: "motion", Data: json.RawMessage(`{"i":` + string(rune('0'+i%10)) + `}`)})
	}
	// One event through first: what the bridge sets up once is in place.
	motion(0)
	testbroker.Eventually(t, 10*time.Second, "the first event imported", func() bool { return imported.Load() == 1 })
	before := scopes()
	const n = 200
	for i := range n {
		motion(i)
	}
	// 200 events: 4 ticks on the medium, then the bridge's worker.
	testbroker.Eventually(t, 10*time.Second, "every event imported", func() bool { return imported.Load() == n+1 })
	if after := scopes(); after > before+10 {
		t.Errorf("%d scopes on the client after %d imported events, %d before", after, n, before)
	}
}
