package bridge

// Busbar requests on CallChannel relayed to add-ons: payloads, errors and
// timeouts as return codes, and what a caller may not reach through the
// bridge.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"busbar/bedrock"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// TestCallCarriesLargePayloads: a busbar request to an add-on, by bare
// name or by address, and its reply carry payloads of many medium frames
// unchanged; a target naming no add-on is not relayed.
func TestCallCarriesLargePayloads(t *testing.T) {
	w := newWorld(t, Options{}, nil)
	lamp := w.addon(t, "lamp")
	bedrock.NewRPC(lamp).Handle("echo", func(p json.RawMessage, _ *bedrock.Envelope) (any, error) { return p, nil })
	d := bedrock.NewDiscovery(lamp, bedrock.AnnounceData{Version: "1"}, nil)
	defer d.Close()
	c := connect(t, w.b, "caller")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	testbroker.Eventually(t, 10*time.Second, "lamp in the registry", func() bool {
		list, err := c.Whois(ctx, "lamp")
		return err == nil && len(list) == 1 && list[0].Address == "lamp.bridge.bus"
	})
	big := strings.Repeat("é😀\"\\", 5000) // ~20 frames each way
	params, _ := json.Marshal(big)
	body, _ := json.Marshal(callBody{Method: "echo", Params: params})
	for _, target := range []string{"lamp", "lamp.bridge.bus"} {
		m, err := c.Scope("s").Channel(CallChannel).Request(ctx, target, body)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		var back string
		if json.Unmarshal(m.Payload(), &back) != nil || back != big {
			t.Fatalf("%s: payload changed on the way", target)
		}
	}
	if _, err := c.Scope("s").Channel(CallChannel).Request(ctx, "bridge.bus", body); err == nil {
		t.Fatal("a target naming no add-on was relayed")
	}
}

// TestCallErrorsMapToReturnCodes: as docs/bedrock.md says, an add-on's
// error is HANDLER_FAILED rc 10 with its text; no answer within 100 ticks
// is rc 20.
// (They used to come back with other codes than the documented ones.)
func TestCallErrorsMapToReturnCodes(t *testing.T) {
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

// TestCallerCannotBorrowTheBridgesIdentity: bedrock.call addressed to the
// bridge's own add-on id is refused, not relayed as a request by the
// bridge's node (and principal).
// (It became a loopback req to the bridge's busbar.request: any node
// allowed bedrock.call could call any channel as the bridge.)
func TestCallerCannotBorrowTheBridgesIdentity(t *testing.T) {
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
