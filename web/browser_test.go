package web_test

// The browser client in a real browser: headless Chromium, driven over the
// DevTools protocol (chromedp), loads a page from a loopback server of its
// own that imports busbar.js from a real broker's HTTP listener and talks
// to a Go node on the same broker.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
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
	"busbar/transport"
	"busbar/web"
)

// chromium finds a Chromium to drive; the tests skip only without one
// (.ci/run installs Debian's).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("BUSBAR_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium installed (apt-get install chromium; or set BUSBAR_CHROMIUM): the browser tests need one")
	return ""
}

// webPrincipal is what a page logs in as: its own principal, one node
// name, and only the channels and namespaces the page needs.
func webPrincipal() auth.Principal {
	return auth.Principal{Name: "web", Nodes: []auth.Pattern{"page"}, Permissions: auth.Permissions{
		Send: []auth.Pattern{"go.>"}, Request: []auth.Pattern{"go.>"}, Publish: []auth.Pattern{"news"},
		Subscribe: []auth.Pattern{"page.>", "news"}, Handle: []auth.Pattern{"page.>"},
		StateRead: []auth.Pattern{"home", "page"}, StateWrite: []auth.Pattern{"home", "page"}, StateAdmin: []auth.Pattern{"page"},
	}}
}

// browserEnv is a broker with an HTTP listener (web.Handler), a page
// server on another loopback port, and a browser tab on the page.
type browserEnv struct {
	bus    *testbroker.Env
	wsURL  string // ws://127.0.0.1:P/bus
	ctx    context.Context
	secret string
}

const testPage = `<!doctype html><meta charset="utf-8"><title>busbar test</title>
<script type="module">
import * as busbar from "%s/busbar.js";
window.busbar = busbar;
window.got = [];
window.changes = [];
window.loaded = true;
</script>`

func startBrowser(t *testing.T) *browserEnv {
	t.Helper()
	exe := chromium(t)
	e := testbroker.Start(t, "tcp", broker.Options{}, webPrincipal())
	httpURL := serveBus(t, e.Broker)
	pageURL := servePage(t, fmt.Sprintf(testPage, httpURL))

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancel)
	if _, err := chromedp.Run(tctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("loading the test page: %v", err)
	}
	if _, err := chromedp.Run(tctx, chromedp.Poll[bool]("window.loaded === true", chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the test page did not load busbar.js: %v", err)
	}
	return &browserEnv{bus: e, wsURL: "ws" + strings.TrimPrefix(httpURL, "http") + transport.WebSocketPath, ctx: tctx, secret: e.Secrets["web"]}
}

// serveBus runs the broker's HTTP listener as busbar serve does, on a real
// loopback port, and returns its http:// URL.
func serveBus(t *testing.T, b *broker.Broker) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wsl := transport.NewWebSocketListener(ln.Addr(), transport.WebSocketOptions{})
	srv := &http.Server{Handler: web.Handler(wsl), ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = b.Serve(wsl) })
	wg.Go(func() { _ = srv.Serve(ln) })
	t.Cleanup(func() {
		_ = wsl.Close()
		_ = srv.Close()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// servePage serves html at / on another loopback port: a page of its own
// origin, as a local application's would be.
func servePage(t *testing.T, html string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(html))
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return "http://" + ln.Addr().String() + "/"
}

// js runs an async function body in the page and decodes what it returns
// (JSON) into out; a rejected promise is the error.
func (b *browserEnv) js(out any, body string, args ...any) error {
	src := "(async () => {" + fmt.Sprintf(body, args...) + "})()"
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[json.RawMessage](src, chromedp.EvalAwaitPromise))
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

func (b *browserEnv) mustJS(t *testing.T, out any, body string, args ...any) {
	t.Helper()
	if err := b.js(out, body, args...); err != nil {
		t.Fatalf("in the page: %v\n%s", err, body)
	}
}

// connectPage logs the page in as node "page".
func (b *browserEnv) connectPage(t *testing.T) {
	t.Helper()
	b.mustJS(t, nil, `window.bus = await busbar.connect(%q, {node: "page", principal: "web", secret: %q}); return null;`, b.wsURL, b.secret)
}

func ctxT(t *testing.T) context.Context { return testclient.Ctx(t, 30*time.Second) }

func TestBrowserEventsBothWays(t *testing.T) {
	b := startBrowser(t)
	b.connectPage(t)
	goNode := testclient.Connect(t, b.bus, "gonode")
	ctx := ctxT(t)

	// Go → page: the page subscribed, the Go node's send is ACCEPTED.
	b.mustJS(t, nil, `await bus.channel("page.in").subscribe((m) => got.push({from: m.from, text: m.text()})); return null;`)
	r, err := goNode.Scope("t").Channel("page.in").Send(ctx, "page", []byte("hello page"))
	if err != nil || r.Result != "ACCEPTED" {
		t.Fatalf("send to the page: %+v, %v", r, err)
	}
	testbroker.Await(t, 10*time.Second, "the page's subscriber", func() error {
		var got []map[string]string
		if err := b.js(&got, `return got;`); err != nil {
			return err
		}
		if len(got) != 1 || got[0]["text"] != "hello page" || got[0]["from"] != "gonode.bus" {
			return fmt.Errorf("page got %v", got)
		}
		return nil
	})

	// page → Go: the Go node subscribed, the page's receipt says ACCEPTED.
	in := make(chan string, 1)
	if _, err := goNode.Scope("t").Channel("go.in").Subscribe(ctx, func(_ context.Context, m *client.Message) {
		in <- m.From() + " " + string(m.Payload())
	}); err != nil {
		t.Fatal(err)
	}
	var receipt map[string]string
	b.mustJS(t, &receipt, `return await bus.channel("go.in").send("gonode", "hello go");`)
	if receipt["result"] != "ACCEPTED" || receipt["id"] == "" {
		t.Errorf("page's receipt: %v", receipt)
	}
	select {
	case got := <-in:
		if got != "page.bus hello go" {
			t.Errorf("Go node got %q", got)
		}
	case <-ctx.Done():
		t.Fatal("the page's event never reached the Go node")
	}
	// Receipts say what happened, as the Go client's do.
	b.mustJS(t, &receipt, `return await bus.channel("go.nobody").send("gonode", "x");`)
	if receipt["result"] != "NO_SUBSCRIBER" {
		t.Errorf("send to a channel nobody listens on: %v", receipt)
	}
	b.mustJS(t, &receipt, `return await bus.channel("go.in").send("absent", "x");`)
	if receipt["result"] != "NOT_CONNECTED" {
		t.Errorf("send to an absent node: %v", receipt)
	}
	b.mustJS(t, &receipt, `return await bus.channel("secret.in").send("gonode", "x");`)
	if receipt["result"] != "REJECTED" {
		t.Errorf("send the page may not make: %v", receipt)
	}
}

func TestBrowserRequestsEachWay(t *testing.T) {
	b := startBrowser(t)
	b.connectPage(t)
	goNode := testclient.Connect(t, b.bus, "gonode")
	ctx := ctxT(t)

	// Go → page: the page's handler answers, or fails with its own code.
	b.mustJS(t, nil, `
		await bus.channel("page.echo").handle((m) => "echo:" + m.text());
		await bus.channel("page.fail").handle(() => { throw new busbar.HandlerError(12, "no such order"); });
		return null;`)
	reply, err := goNode.Scope("t").Channel("page.echo").Request(ctx, "page", []byte("ping"))
	if err != nil || string(reply.Payload()) != "echo:ping" || reply.From() != "page.bus" {
		t.Fatalf("request to the page: %v, %v", reply, err)
	}
	_, err = goNode.Scope("t").Channel("page.fail").Request(ctx, "page", nil)
	var re *client.RequestError
	if !errors.As(err, &re) || !errors.Is(err, client.ErrHandlerFailed) || re.RC != 12 || re.Text != "no such order" {
		t.Errorf("a failing page handler: %v", err)
	}

	// page → Go: the Go handler answers; failures are typed RequestErrors.
	if _, err := goNode.Scope("t").Channel("go.upper").Handle(ctx, func(_ context.Context, m *client.Message) ([]byte, error) {
		return []byte(strings.ToUpper(string(m.Payload()))), nil
	}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	b.mustJS(t, &got, `const r = await bus.channel("go.upper").request("gonode", "shout"); return {text: r.text(), from: r.from, rc: r.rc};`)
	if got["text"] != "SHOUT" || got["from"] != "gonode.bus" || got["rc"] != 0.0 {
		t.Errorf("page's request: %v", got)
	}
	for _, c := range []struct{ call, kind string }{
		{`bus.channel("go.none").request("gonode", "x")`, "NO_HANDLER"},
		{`bus.channel("secret.x").request("gonode", "x")`, "REJECTED"},
		{`bus.channel("go.upper").request("absent", "x")`, "NO_HANDLER"},
	} {
		b.mustJS(t, &got, `try { await %s; return {}; } catch (e) { return {name: e.name, kind: e.kind, rc: e.rc, req: e instanceof busbar.RequestError}; }`, c.call)
		if got["kind"] != c.kind || got["req"] != true || got["rc"].(float64) < 10 {
			t.Errorf("%s: %v, want a RequestError %s", c.call, got, c.kind)
		}
	}
	// Refused before sending: the typed local errors.
	for _, c := range []struct{ call, name string }{
		{`bus.channel("bus.hello")`, "BadChannelError"},
		{`bus.channel("go.upper").request("Not A Node", "x")`, "BadAddressError"},
		{`bus.channel("go.upper").request("gonode", new Uint8Array(bus.welcome.max_payload + 1))`, "PayloadTooLargeError"},
	} {
		b.mustJS(t, &got, `try { await %s; return {}; } catch (e) { return {name: e.name}; }`, c.call)
		if got["name"] != c.name {
			t.Errorf("%s: %v, want %s", c.call, got, c.name)
		}
	}

	// A publication reaches the page and the Go node, one result each.
	news := make(chan string, 1)
	if _, err := goNode.Scope("t").Channel("news").Subscribe(ctx, func(_ context.Context, m *client.Message) { news <- string(m.Payload()) }); err != nil {
		t.Fatal(err)
	}
	var pub struct {
		ID      string
		Results []struct{ Node, Result string }
	}
	b.mustJS(t, &pub, `await bus.channel("news").subscribe(() => {}); return await bus.channel("news").publish("extra");`)
	results := map[string]string{}
	for _, r := range pub.Results {
		results[r.Node] = r.Result
	}
	if pub.ID == "" || results["gonode"] != "ACCEPTED" || results["page"] != "ACCEPTED" {
		t.Errorf("publication: %+v", pub)
	}
	if got := <-news; got != "extra" {
		t.Errorf("Go node's publication: %q", got)
	}
}

func TestBrowserStateWatch(t *testing.T) {
	b := startBrowser(t)
	b.connectPage(t)
	goNode := testclient.Connect(t, b.bus, "thermostat")
	ctx := ctxT(t)
	home := goNode.State("home")
	if _, err := home.Set(ctx, "target", 20.5); err != nil {
		t.Fatal(err)
	}

	var initial []map[string]any
	b.mustJS(t, &initial, `window.w = await bus.state("home").watch((e) => changes.push(e)); return w.initial.entries;`)
	if len(initial) != 1 || initial[0]["k"] != "target" || initial[0]["v"] != 20.5 || initial[0]["src"] != "thermostat" {
		t.Fatalf("the watch's snapshot: %v", initial)
	}
	if _, err := home.Set(ctx, "target", 22); err != nil {
		t.Fatal(err)
	}
	if _, err := home.Set(ctx, "mode", "eco"); err != nil {
		t.Fatal(err)
	}
	testbroker.Await(t, 10*time.Second, "the page's watch", func() error {
		var ch []map[string]any
		if err := b.js(&ch, `return changes;`); err != nil {
			return err
		}
		if len(ch) != 2 || ch[0]["k"] != "target" || ch[0]["v"] != 22.0 || ch[1]["k"] != "mode" || ch[1]["v"] != "eco" {
			return fmt.Errorf("changes %v", ch)
		}
		return nil
	})

	// The page may write "home" but does not own it: REJECTED, typed.
	var got map[string]any
	b.mustJS(t, &got, `try { await bus.state("home").set("target", 30); return {}; } catch (e) { return {kind: e.kind}; }`)
	if got["kind"] != "REJECTED" {
		t.Errorf("a foreign write: %v", got)
	}
	// Its own namespace: set, get, and the Go node reads it.
	b.mustJS(t, &got, `const e = await bus.state("page").set("seen", {n: 1}); const r = await bus.state("page").get("seen"); return {set: e, got: r};`)
	if set := got["set"].(map[string]any); set["src"] != "page" || set["ver"] != 1.0 {
		t.Errorf("page's write: %v", got)
	}
	e, found, err := goNode.State("page").Get(ctx, "seen")
	if err != nil || !found || string(e.Value) != `{"n":1}` || e.Source != "page" {
		t.Errorf("Go reads the page's write: %+v %v %v", e, found, err)
	}
}

func TestBrowserRefusedLogins(t *testing.T) {
	b := startBrowser(t)
	var got map[string]any
	b.mustJS(t, &got, `try { await busbar.connect(%q, {node: "page", principal: "web", secret: "wrong"}); return {}; } catch (e) { return {name: e.name, code: e.code}; }`, b.wsURL)
	if got["name"] != "AuthError" {
		t.Errorf("a wrong secret: %v", got)
	}
	b.mustJS(t, &got, `try { await busbar.connect(%q, {node: "other", principal: "web", secret: %q}); return {}; } catch (e) { return {name: e.name}; }`, b.wsURL, b.secret)
	if got["name"] != "AuthError" {
		t.Errorf("a node name the principal may not claim: %v", got)
	}
	// Closing fails what is open and refuses what follows.
	b.connectPage(t)
	b.mustJS(t, &got, `bus.close(); try { await bus.channel("go.x").send("gonode", "x"); return {}; } catch (e) { return {name: e.name}; }`)
	if got["name"] != "ClosedError" {
		t.Errorf("a call after close: %v", got)
	}
}
