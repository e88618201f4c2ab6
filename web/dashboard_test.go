package web_test

// The operator's dashboard (package ops) in headless Chromium: it loads
// with the token, shows a node that connects during the test, updates a
// counter and a stream rate live over its WebSocket feed (no reload), lists
// a state write, and is refused without the token. A screenshot is left in
// the test's temporary directory, or in $BUSBAR_SCREENSHOTS, for a person
// to look at.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
	"busbar/ops"
	"busbar/wire"
)

const dashToken = "dashboard-test-token-0123456789abcdef0123456789"

// serveOps serves web.Handler's paths and the operator's on a loopback
// port, as busbar serve's HTTP listener does, and returns its URL.
func serveOps(t *testing.T, b *broker.Broker) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	ops.Register(mux, ops.Options{Broker: b, Token: dashToken})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	t.Cleanup(func() { _ = srv.Close(); wg.Wait() })
	return "http://" + ln.Addr().String()
}

func TestDashboardShowsTheBusLive(t *testing.T) {
	exe := chromium(t)
	e := testbroker.Start(t, "tcp", broker.Options{})
	base := serveOps(t, e.Broker)

	tctx := browserTab(t, exe, chromedp.WindowSize(1200, 900))

	text := func(sel string) (string, error) {
		return chromedp.Run(tctx, chromedp.Evaluate[string](`document.querySelector("`+sel+`")?.textContent ?? ""`))
	}
	await := func(what, sel, want string) {
		t.Helper()
		testbroker.Await(t, 20*time.Second, what, func() error {
			s, err := text(sel)
			if err != nil {
				return err
			}
			if !strings.Contains(s, want) {
				return errors.New(sel + " shows " + s)
			}
			return nil
		})
	}

	// Without the token: refused, nothing of the bus shown.
	if _, err := chromedp.Run(tctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	await("the refusal", "body", "needs the token")

	if _, err := chromedp.Run(tctx, chromedp.Navigate(base+"/?token="+dashToken)); err != nil {
		t.Fatal(err)
	}
	await("the first status", "#ready", "ready")
	await("the live feed", "#live", "live")
	if loc, err := chromedp.Run(tctx, chromedp.Location()); err != nil || strings.Contains(loc, "token") {
		t.Fatalf("the address bar keeps the token: %q %v", loc, err)
	}
	// A marker a reload would wipe: everything below arrives live.
	if _, err := chromedp.Run(tctx, chromedp.Evaluate[bool](`window.loadedOnce = true`)); err != nil {
		t.Fatal(err)
	}

	// A node connects: the page shows it, with its subscription.
	c := testclient.Connect(t, e, "gonode")
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()
	if _, err := c.Scope("p").Channel("orders.new").Subscribe(cctx, func(context.Context, *client.Message) {}); err != nil {
		t.Fatal(err)
	}
	await("the node", "#nodes tbody", "gonode")
	await("its subscription", "#nodes tbody", "orders.new")

	// A service group: the services show the group, and the groups its
	// members with the requests sent to each; a queue member's
	// subscription says its queue.
	for _, node := range []string{"worker-a", "worker-b"} {
		w := testclient.Connect(t, e, node)
		if _, err := w.Scope("p").Channel("work").Handle(cctx, func(context.Context, *client.Message) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Announce(cctx, wire.Announcement{Service: "echoer", Group: "pool", Channels: []string{"work"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Scope("p").Channel("jobs").QueueSubscribe(cctx, "crew", func(context.Context, *client.Message) {}); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		if _, err := c.Scope("p").Channel("work").Request(cctx, "echoer", nil); err != nil {
			t.Fatal(err)
		}
	}
	await("the service's group", "#services tbody", "pool")
	await("a member's requests", "#groups tbody", "echoerpoolworker-abroker2")
	await("the other member's", "#groups tbody", "echoerpoolworker-bbroker2")
	await("a queue member", "#nodes tbody", "jobs (queue crew)")

	// Streams flow: the page shows a stream rate above 0, the channel,
	// and draws the rate chart.
	pub := testclient.Connect(t, e, "pubnode")
	orders := pub.Scope("p").Channel("orders.new")
	testbroker.Await(t, 20*time.Second, "a live stream rate", func() error {
		for range 50 {
			if err := orders.Emit(cctx, []byte("tick")); err != nil {
				return err
			}
		}
		r, err := chromedp.Run(tctx, chromedp.Evaluate[float64](`(() => {
			const row = [...document.querySelectorAll("#kinds tbody tr")].find(r => r.cells[0].textContent === "stream");
			return row ? Number(row.cells[2].textContent) : 0;
		})()`))
		if err != nil {
			return err
		}
		if r <= 0 {
			return errors.New("the stream rate shows 0")
		}
		return nil
	})
	await("the channel", "#channels tbody", "orders.new")
	if n, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll("#chart-rates path").length`)); err != nil || n == 0 {
		t.Fatalf("the rate chart has %d lines: %v", n, err)
	}

	// A state write: the namespace lists its key, and the events show it.
	if _, err := c.State("inventory").Set(cctx, "widgets", 3); err != nil {
		t.Fatal(err)
	}
	await("the namespace's key", "#namespaces tbody", "widgets = 3")
	await("the state event", "#events tbody", "inventory")

	// A send nobody hears: a delivery issue, listed from its receipt.
	if r, err := pub.Scope("p").Channel("nobody.listens").Send(cctx, "gonode", []byte("x")); err != nil || r.Result != "NO_SUBSCRIBER" {
		t.Fatalf("send: %+v %v", r, err)
	}
	await("the delivery issue", "#events tbody", "receipt NO_SUBSCRIBER+1")

	// Refused logins: the counter changes, and the refusals are listed.
	for range 3 {
		if _, err := testclient.DialClient(e, "intruder", func(o *client.Options) { o.Credential = auth.Credential{Principal: "local", Secret: "wrong"} }); err == nil {
			t.Fatal("a wrong secret connected")
		}
	}
	await("the refusals", "#counters tbody", "refused3")
	await("the failed logins", "#results tbody", "AUTH3")
	if again, err := chromedp.Run(tctx, chromedp.Evaluate[bool](`window.loadedOnce === true`)); err != nil || !again {
		t.Fatalf("the page reloaded: %v %v", again, err)
	}

	png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	// The temporary directory goes with the test; BUSBAR_SCREENSHOTS
	// names one that stays.
	dir := os.Getenv("BUSBAR_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	shot := filepath.Join(dir, "dashboard.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}
