package bridge

// Regression tests from the review of issue 6 (the bedrock bus and its
// bridge): each test's comment describes the defect it caught; all are
// fixed. TestReview6RandomEnvelopesMatchJS cross-checks random envelopes
// against node when it is installed.

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"

	"busbar/bedrock"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestReview6ErrorsMapToReturnCodes: docs/bedrock.md — an add-on's error
// is HANDLER_FAILED rc 10 with its text; no answer within 100 ticks is
// rc 20.
func TestReview6ErrorsMapToReturnCodes(t *testing.T) {
	w := newWorld(t, Options{}, nil)
	lamp := w.addon(t, "lamp")
	bedrock.NewRPC(lamp).Handle("fail", func(json.RawMessage, *bedrock.Envelope) (any, error) { return nil, errors.New("bulb broken") })
	d := bedrock.NewDiscovery(lamp, bedrock.AnnounceData{Version: "1"}, nil)
	defer d.Close()
	mute := w.addon(t, "mute") // hears requests, never answers
	dm := bedrock.NewDiscovery(mute, bedrock.AnnounceData{Version: "1"}, nil)
	defer dm.Close()
	c := connect(t, w.b, "caller")
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Second)
	defer cancel()
	testbroker.Eventually(t, 5*time.Second, "add-ons in the registry", func() bool {
		a, err1 := c.Whois(ctx, "lamp")
		b, err2 := c.Whois(ctx, "mute")
		return err1 == nil && err2 == nil && len(a) == 1 && len(b) == 1
	})
	_, err := c.Scope("s").Channel(CallChannel).Request(ctx, "lamp", []byte(`{"method":"fail"}`))
	var re *client.RequestError
	if !errors.As(err, &re) || re.Kind != wire.ResultHandler || re.RC != wire.RCError || re.Text != "bulb broken" {
		t.Errorf("remote error: %#v", err)
	}
	start := time.Now()
	_, err = c.Scope("s").Channel(CallChannel).Request(ctx, "mute", []byte(`{"method":"x"}`))
	if !errors.As(err, &re) || re.RC != wire.RCFailure {
		t.Errorf("no answer: %#v", err)
	}
	t.Logf("no answer after %v: %v", time.Since(start), err)
}

// TestReview6CloseReleasesTheClient: Close stops the bridge; the client
// stays the caller's, so the bridge's registrations on it (the
// bedrock.call handler, the add-ons announced as services) must go with
// the bridge: a new bridge on the same client must start.
func TestReview6CloseReleasesTheClient(t *testing.T) {
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

// TestReview6NoScopePerMessage: every imported event and every add-on
// busbar.request must not leave a Scope registered on the client for the
// client's lifetime.
func TestReview6NoScopePerMessage(t *testing.T) {
	w := newWorld(t, Options{}, nil)
	cv := reflect.ValueOf(w.bridge.c).Elem()
	mu := (*sync.Mutex)(unsafe.Pointer(cv.FieldByName("mu").UnsafeAddr()))
	scopes := func() int { // client.Client.scopes, under client.Client.mu
		mu.Lock()
		defer mu.Unlock()
		return cv.FieldByName("scopes").Len()
	}
	lamp := w.addon(t, "lamp")
	time.Sleep(200 * time.Millisecond)
	before := scopes()
	const n = 200
	for i := range n {
		lamp.Send(bedrock.SendOptions{Type: "motion", Data: json.RawMessage(`{"i":` + string(rune('0'+i%10)) + `}`)})
	}
	time.Sleep(time.Second) // 200 events: 4 ticks on the medium, then the worker
	if after := scopes(); after > before+10 {
		t.Errorf("%d scopes on the client after %d imported events, %d before", after, n, before)
	}
}

// TestReview6CallerCannotBorrowTheBridgesIdentity: bedrock.call addressed
// to the bridge's own add-on id is a loopback req to the bridge's
// busbar.request: any busbar node allowed to request bedrock.call can then
// make any request on any channel as the bridge's node (and principal).
func TestReview6CallerCannotBorrowTheBridgesIdentity(t *testing.T) {
	w := newWorld(t, Options{}, nil)
	admin := connect(t, w.b, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	from := make(chan string, 1)
	if _, err := admin.Scope("a").Channel("admin.reset").Handle(ctx, func(_ context.Context, m *client.Message) ([]byte, error) {
		from <- m.From()
		return []byte(`"done"`), nil
	}); err != nil {
		t.Fatal(err)
	}
	caller := connect(t, w.b, "caller")
	body := `{"method":"busbar.request","params":{"target":"admin.bus","channel":"admin.reset","payload":{}}}`
	m, err := caller.Scope("s").Channel(CallChannel).Request(ctx, ServiceName+".bridge.bus", []byte(body))
	if err == nil {
		t.Fatalf("relayed: reply %s, admin.reset called by %q", m.Payload(), <-from)
	}
	t.Logf("refused: %v", err)
}
