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

// TestDashboardShowsHistoryAtOnceAndReadsAtBothSizes: traffic that
// happened before the page was opened is charted on its first paint (the
// broker's history), the channel count on the page is the traffic sent,
// a run of alike events is folded into one row and the list filters, the
// chart's window can be chosen, and the page fits a phone's width.
// Screenshots at 1400×900 and 390×844 are left for a person to look at.
func TestDashboardShowsHistoryAtOnceAndReadsAtBothSizes(t *testing.T) {
	exe := chromium(t)
	e := testbroker.Start(t, "tcp", broker.Options{})
	base := serveOps(t, e.Broker)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Known traffic, before any page is open: 37 streams on one channel
	// to a subscriber, 50 writes of one key.
	sub := testclient.Connect(t, e, "counter")
	got := make(chan struct{}, 64)
	if _, err := sub.Scope("p").Channel("orders.new").Subscribe(ctx, func(context.Context, *client.Message) { got <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	pub := testclient.Connect(t, e, "pubnode")
	const sent = 37
	for range sent {
		if err := pub.Scope("p").Channel("orders.new").Emit(ctx, []byte("tick")); err != nil {
			t.Fatal(err)
		}
	}
	for range sent {
		select {
		case <-got:
		case <-ctx.Done():
			t.Fatal("the subscriber did not get every stream")
		}
	}
	for i := range 50 {
		if _, err := sub.State("inventory").Set(ctx, "widgets", i); err != nil {
			t.Fatal(err)
		}
	}
	// Two samples after the traffic: a rate to chart.
	testbroker.Await(t, 20*time.Second, "the traffic in the broker's history", func() error {
		h := e.Broker.History()
		if n := len(h); n < 2 || h[n-1].In < sent || h[n-2].In < sent {
			return errors.New("not sampled yet")
		}
		return nil
	})

	tctx := browserTab(t, exe, chromedp.WindowSize(1400, 900))
	if _, err := chromedp.Run(tctx, chromedp.EmulateViewport(1400, 900)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(tctx, chromedp.Navigate(base+"/?token="+dashToken)); err != nil {
		t.Fatal(err)
	}
	evalBool := func(expr string) (bool, error) { return chromedp.Run(tctx, chromedp.Evaluate[bool](expr)) }
	evalInt := func(expr string) (int, error) { return chromedp.Run(tctx, chromedp.Evaluate[int](expr)) }
	awaitTrue := func(what, expr string) {
		t.Helper()
		testbroker.Await(t, 20*time.Second, what, func() error {
			ok, err := evalBool(expr)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("not yet: " + expr)
			}
			return nil
		})
	}
	awaitTrue("the first frame", `document.getElementById("updated").textContent !== "never"`)
	if bars, err := evalInt(`document.querySelectorAll('#chart-rates [data-series="in"]').length`); err != nil || bars == 0 {
		t.Fatalf("the first paint charts no past traffic: %d bars (%v)", bars, err)
	}
	count, err := chromedp.Run(tctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#channels tbody tr")].find(r => r.cells[0].textContent === "orders.new")?.cells[1].textContent ?? ""`))
	if err != nil || count != "37" {
		t.Fatalf("the channel shows %q messages, %d were sent (%v)", count, sent, err)
	}
	awaitTrue("the folded state writes", `[...document.querySelectorAll("#events tbody tr")].some(r => r.textContent.includes("inventory") && r.textContent.includes("×50"))`)
	if rowsShown, err := evalInt(`document.querySelectorAll("#events tbody tr").length`); err != nil || rowsShown > 15 {
		t.Fatalf("%d event rows shown (%v)", rowsShown, err)
	}
	// Filtered: only matching rows.
	if _, err := evalBool(`(() => { const f = document.getElementById("event-filter"); f.value = "no-such-thing"; f.dispatchEvent(new Event("input")); return true; })()`); err != nil {
		t.Fatal(err)
	}
	awaitTrue("the filter", `document.querySelectorAll("#events tbody tr").length === 0 && document.getElementById("event-count").textContent.startsWith("0 of")`)
	if _, err := evalBool(`(() => { const f = document.getElementById("event-filter"); f.value = ""; f.dispatchEvent(new Event("input")); return true; })()`); err != nil {
		t.Fatal(err)
	}
	// The window: a minute.
	if _, err := evalBool(`(() => { const w = document.getElementById("window"); w.value = "60"; w.dispatchEvent(new Event("change")); return true; })()`); err != nil {
		t.Fatal(err)
	}
	awaitTrue("the one-minute window", `[...document.querySelectorAll("#chart-rates text")].some(x => x.textContent === "-60 s")`)

	dir := os.Getenv("BUSBAR_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	shoot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", filepath.Join(dir, name), len(png))
	}
	shoot("dashboard-1400x900.png")

	if _, err := chromedp.Run(tctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(1))); err != nil {
		t.Fatal(err)
	}
	awaitTrue("the phone's width", `window.innerWidth === 390`)
	if overflow, err := evalInt(`document.documentElement.scrollWidth - window.innerWidth`); err != nil || overflow > 0 {
		t.Fatalf("the page is %d px wider than a 390 px screen (%v)", overflow, err)
	}
	shoot("dashboard-390x844.png")
}
