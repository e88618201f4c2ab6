package web_test

// The browser client in a real browser: headless Chromium, driven over the
// DevTools protocol (chromedp), loads a page from a loopback server of its
// own that imports busbar.js from a real broker's HTTP listener and talks
// to a Go node on the same broker.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testcert"
	"busbar/internal/testclient"
	"busbar/transport"
	"busbar/web"
	"busbar/wire"
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
	if os.Getenv("BUSBAR_REQUIRE_BROWSER") != "" { // CI: a skip would hide a missing install
		t.Fatal("no Chromium installed, and BUSBAR_REQUIRE_BROWSER is set")
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
	return startBrowserWith(t, browserConfig{})
}

// foreignHost is a name the browser resolves to 127.0.0.1: a page served
// from it has a foreign origin, as a rebinding attacker's page would.
const foreignHost = "evil.test"

// browserConfig varies the browser tests' setup.
type browserConfig struct {
	broker   broker.Options
	pageHost string   // where the page comes from: 127.0.0.1 (default), or foreignHost
	origins  []string // allowed beyond the defaults (--ws-origin)
	tls      bool     // the HTTP listener over TLS (--https): https:// and wss://
}

// startBrowserWith starts the broker and its HTTP listener as cfg says,
// and loads the page in a fresh headless Chromium.
func startBrowserWith(t *testing.T, cfg browserConfig) *browserEnv {
	t.Helper()
	exe := chromium(t)
	e := testbroker.Start(t, "tcp", cfg.broker, webPrincipal())
	httpURL := serveBus(t, e.Broker, cfg)
	pageURL := servePage(t, fmt.Sprintf(testPage, httpURL))
	if cfg.pageHost != "" {
		pageURL = strings.Replace(pageURL, "127.0.0.1", cfg.pageHost, 1)
	}

	extra := []chromedp.ExecAllocatorOption{chromedp.Flag("host-resolver-rules", "MAP "+foreignHost+" 127.0.0.1")}
	if cfg.tls {
		extra = append(extra, chromedp.Flag("ignore-certificate-errors", true)) // the test's own certificate
	}
	tctx := browserTab(t, exe, extra...)
	if _, err := chromedp.Run(tctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("loading the test page: %v", err)
	}
	if _, err := chromedp.Run(tctx, chromedp.Poll[bool]("window.loaded === true", chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the test page did not load busbar.js: %v", err)
	}
	wsURL := "ws" + strings.TrimPrefix(httpURL, "http") + transport.WebSocketPath // https: -> wss:
	return &browserEnv{bus: e, wsURL: wsURL, ctx: tctx, secret: e.Secrets["web"]}
}

// browserTab opens a tab in a fresh headless Chromium (exe), closed at
// cleanup; its context ends after 90 s.
func browserTab(t *testing.T, exe string, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, extra...)...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancel)
	return tctx
}

// serveBus runs the broker's HTTP listener as busbar serve does, on a real
// loopback port, and returns its http:// (or https://) URL.
func serveBus(t *testing.T, b *broker.Broker, cfg browserConfig) string {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, scheme := tcp, "http://"
	if cfg.tls {
		certFile, keyFile, _ := testcert.Write(t)
		tlsCfg, err := transport.LoadTLS(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		ln, scheme = tls.NewListener(tcp, tlsCfg), "https://"
	}
	wsl := transport.NewWebSocketListener(tcp.Addr(), transport.WebSocketOptions{Origins: cfg.origins})
	srv := &http.Server{Handler: web.Handler(wsl), ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = b.Serve(wsl) })
	wg.Go(func() { _ = srv.Serve(ln) })
	t.Cleanup(func() {
		_ = wsl.Close()
		_ = srv.Close()
		wg.Wait()
	})
	return scheme + tcp.Addr().String()
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

// awaitJS polls expr in the page until check accepts what it returns.
func awaitJS[T any](t *testing.T, b *browserEnv, what, expr string, check func(T) error) {
	t.Helper()
	testbroker.Await(t, 10*time.Second, what, func() error {
		var v T
		if err := b.js(&v, "%s", expr); err != nil {
			return err
		}
		return check(v)
	})
}

// connectPage logs the page in as node "page".
func (b *browserEnv) connectPage(t *testing.T) {
	t.Helper()
	b.mustJS(t, nil, `window.bus = await busbar.connect(%q, {node: "page", principal: "web", secret: %q}); return null;`, b.wsURL, b.secret)
}

// pageAndGoNode starts the browser with the page logged in, and a Go
// node on the same broker.
func pageAndGoNode(t *testing.T, node string) (*browserEnv, *client.Client, context.Context) {
	t.Helper()
	b := startBrowser(t)
	b.connectPage(t)
	return b, testclient.Connect(t, b.bus, node), ctxT(t)
}

func ctxT(t *testing.T) context.Context { return testclient.Ctx(t, 30*time.Second) }

func TestBrowserEventsBothWays(t *testing.T) {
	b, goNode, ctx := pageAndGoNode(t, "gonode")

	// Go → page: the page subscribed, the Go node's send is ACCEPTED.
	b.mustJS(t, nil, `await bus.channel("page.in").subscribe((m) => got.push({from: m.from, text: m.text()})); return null;`)
	r, err := goNode.Scope("t").Channel("page.in").Send(ctx, "page", []byte("hello page"))
	if err != nil || r.Result != "ACCEPTED" {
		t.Fatalf("send to the page: %+v, %v", r, err)
	}
	awaitJS(t, b, "the page's subscriber", `return got;`, func(got []map[string]string) error {
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
	b, goNode, ctx := pageAndGoNode(t, "gonode")

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
	// A payload of the broker's limit goes; its deadline bounds a request
	// whose handler does not answer: TIMEOUT, typed.
	b.mustJS(t, &got, `const r = await bus.channel("go.upper").request("gonode", new Uint8Array(bus.welcome.max_payload)); return {n: r.payload.length};`)
	if got["n"] != float64(1<<20) {
		t.Errorf("a payload of max_payload: %v", got)
	}
	release := make(chan struct{})
	defer close(release)
	if _, err := goNode.Scope("t").Channel("go.stuck").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) {
		<-release
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	b.mustJS(t, &got, `try { await bus.channel("go.stuck").request("gonode", "x", {timeout: 200}); return {}; } catch (e) { return {kind: e.kind, req: e instanceof busbar.RequestError}; }`)
	if got["kind"] != "TIMEOUT" || got["req"] != true {
		t.Errorf("a request past its deadline: %v", got)
	}

	// Refused before sending: the typed local errors; a channel name at
	// MAX_CHANNEL_LEN is sent (and refused by permission), one byte more
	// is not.
	b.mustJS(t, &got, `try { await bus.channel("go." + "c".repeat(busbar.MAX_CHANNEL_LEN - 3)).request("gonode", "x"); return {}; } catch (e) { return {name: e.name, kind: e.kind}; }`)
	if got["name"] != "RequestError" || got["kind"] != "NO_HANDLER" {
		t.Errorf("a channel of MAX_CHANNEL_LEN bytes: %v", got)
	}
	for _, c := range []struct{ call, name string }{
		{`bus.channel("go." + "c".repeat(busbar.MAX_CHANNEL_LEN - 2))`, "BadChannelError"},
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
	// A stream message: fire and forget, delivered all the same.
	b.mustJS(t, nil, `bus.channel("news").emit("stream-1"); return null;`)
	if got := <-news; got != "stream-1" {
		t.Errorf("Go node's stream message: %q", got)
	}
}

func TestBrowserStateWatch(t *testing.T) {
	b, goNode, ctx := pageAndGoNode(t, "thermostat")
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
	awaitJS(t, b, "the page's watch", `return changes;`, func(ch []map[string]any) error {
		if len(ch) != 2 || ch[0]["k"] != "target" || ch[0]["v"] != 22.0 || ch[1]["k"] != "mode" || ch[1]["v"] != "eco" {
			return fmt.Errorf("changes %v", ch)
		}
		return nil
	})

	// A delta lost on the way (the replica forgets "mode", and the next
	// number skips): the watch renews itself from a snapshot and delivers
	// what differs, once.
	b.mustJS(t, nil, `w.entries.delete("mode"); w._event("bus.state.delta", {ns: "home", seq: w._seq + 2, key: "x", ver: 1, src: "nobody"}); return null;`)
	awaitJS(t, b, "the resync", `return changes;`, func(ch []map[string]any) error {
		if len(ch) != 3 || ch[2]["k"] != "mode" || ch[2]["v"] != "eco" {
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
	// The owner opens the key; the Go node may then write it; the page
	// sees that in a snapshot, and deletes it.
	b.mustJS(t, &got, `return await bus.state("page").open("seen");`)
	if got["open"] != true {
		t.Errorf("open: %v", got)
	}
	if _, err := goNode.State("page").Set(ctx, "seen", 2); err != nil {
		t.Fatalf("the Go node writes the opened key: %v", err)
	}
	b.mustJS(t, &got, `const s = await bus.state("page").snapshot(); return {owner: s.owner, v: s.entries[0].v, src: s.entries[0].src};`)
	if got["owner"] != "page" || got["v"] != 2.0 || got["src"] != "thermostat" {
		t.Errorf("snapshot: %v", got)
	}
	// A write that loses to a version the page had not seen is written
	// once more above it, as the Go client's is.
	if _, err := goNode.State("page").Set(ctx, "seen", 3); err != nil {
		t.Fatal(err)
	}
	b.mustJS(t, &got, `const d = await bus.state("page").delete("seen"); return {del: d.del, ver: d.ver, src: d.src};`)
	if got["del"] != true || got["src"] != "page" || got["ver"] != 4.0 { // its clock said 2; ver 3 lost to thermostat's 3 (equal: the greater source wins)
		t.Errorf("a delete over a newer version: %v", got)
	}
	if e, _, _ := goNode.State("page").Get(ctx, "seen"); !e.Deleted || float64(e.Version) != got["ver"] {
		t.Errorf("the Go node reads %+v after the page's delete", e)
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
	// A server that upgrades but never says bus.info (a WebSocketListener
	// nobody serves): connect gives up at handshakeTimeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent := transport.NewWebSocketListener(ln.Addr(), transport.WebSocketOptions{})
	srv := &http.Server{Handler: silent, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { _ = silent.Close(); _ = srv.Close(); <-served }()
	b.mustJS(t, &got, `try { await busbar.connect("ws://%s/bus", {node: "page", handshakeTimeout: 300}); return {}; } catch (e) { return {name: e.name, code: e.code}; }`, ln.Addr())
	if got["code"] != "TIMEOUT" {
		t.Errorf("a broker that never speaks: %v", got)
	}

	// Closing fails what is open and refuses what follows.
	b.connectPage(t)
	b.mustJS(t, &got, `bus.close(); try { await bus.channel("go.x").send("gonode", "x"); return {}; } catch (e) { return {name: e.name}; }`)
	if got["name"] != "ClosedError" {
		t.Errorf("a call after close: %v", got)
	}
}

// A page of a foreign origin loads busbar.js (public code) but may not
// connect: the upgrade gets 403, connect rejects with DISCONNECT, and the
// broker never sees a connection. Listed (--ws-origin), the same page
// connects.
func TestBrowserForeignOriginIsRefused(t *testing.T) {
	b := startBrowserWith(t, browserConfig{pageHost: foreignHost})
	var got map[string]any
	b.mustJS(t, &got, `try { await busbar.connect(%q, {node: "page", principal: "web", secret: %q}); return {}; } catch (e) { return {name: e.name, code: e.code, origin: location.origin}; }`, b.wsURL, b.secret)
	if got["name"] != "BusError" || got["code"] != "DISCONNECT" || !strings.Contains(got["origin"].(string), foreignHost) {
		t.Fatalf("a page of %v: %v, want DISCONNECT", got["origin"], got)
	}
	if n := len(b.bus.Broker.Directory()); n != 0 {
		t.Fatalf("the broker registered %d nodes", n)
	}

	b = startBrowserWith(t, browserConfig{pageHost: foreignHost, origins: []string{foreignHost + ":*"}})
	b.connectPage(t)
}

// The page keeps its lease with heartbeats while idle: its lease is
// renewed past several lease periods, on the same connection. The lease
// is 15 heartbeats, so a browser slowed by a busy machine keeps it.
func TestBrowserHeartbeatsKeepTheLease(t *testing.T) {
	const lease = 1500 * time.Millisecond
	b := startBrowserWith(t, browserConfig{broker: broker.Options{HeartbeatInterval: 100 * time.Millisecond, LeaseTimeout: lease}})
	b.connectPage(t)
	start := time.Now()
	var epoch uint64
	testbroker.Await(t, time.Minute, "the idle page's lease renewed past 3 leases", func() error {
		for _, n := range b.bus.Broker.Directory() {
			if n.Node != "page" {
				continue
			}
			if epoch == 0 {
				epoch = n.Epoch
			}
			if n.Epoch != epoch {
				return fmt.Errorf("the page reconnected: epoch %d, then %d", epoch, n.Epoch)
			}
			if n.LeaseExpires.Before(start.Add(3 * lease)) {
				return fmt.Errorf("lease expires %v", n.LeaseExpires.Sub(start))
			}
			return nil
		}
		return errors.New("the page is not in the directory")
	})
	var closed bool
	b.mustJS(t, &closed, `return bus._closed !== null;`)
	if closed {
		t.Fatal("the page's client ended")
	}
}

// The example of docs/browser.md runs as written (its import and address
// replaced by the test broker's) and logs what the doc says.
func TestBrowserDocExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/browser.md")
	if err != nil {
		t.Fatal(err)
	}
	code := fenced(t, string(doc), "<!-- browser-example:", "```js")
	want := strings.Split(strings.TrimSpace(fenced(t, string(doc), "<!-- browser-example-output -->", "```text")), "\n")

	b := startBrowser(t)
	billing := testclient.Connect(t, b.bus, "billing")
	ctx := ctxT(t)
	s := billing.Scope("doc")
	if _, err := s.Channel("go.orders").Subscribe(ctx, func(context.Context, *client.Message) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Channel("go.invoice").Handle(ctx, func(_ context.Context, m *client.Message) ([]byte, error) {
		return fmt.Appendf(nil, "total for %s: 42", m.Payload()), nil
	}); err != nil {
		t.Fatal(err)
	}
	home := billing.State("home")
	if _, err := home.Set(ctx, "target", 20.5); err != nil {
		t.Fatal(err)
	}

	lines := strings.Split(code, "\n")
	if !strings.HasPrefix(lines[0], "import ") {
		t.Fatalf("the example does not start with its import: %q", lines[0])
	}
	body := strings.Join(lines[1:], "\n")
	body = strings.ReplaceAll(body, "ws://127.0.0.1:7475/bus", b.wsURL)
	prelude := fmt.Sprintf("const { connect, RequestError } = busbar; const SECRET = %q; window.docLog = []; const console = { log: (...a) => docLog.push(a.join(\" \")) };\n", b.secret)
	b.mustJS(t, nil, "%s", prelude+body+"\nwindow.docBus = bus; return null;")
	var got []string
	b.mustJS(t, &got, `return docLog;`)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the example logged:\n%s\nthe doc says:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// What the doc says follows, as the Go side acts.
	if r, err := s.Channel("page.alerts").Send(ctx, "page", []byte("disk full")); err != nil || r.Result != "ACCEPTED" {
		t.Fatalf("alert: %+v %v", r, err)
	}
	if _, err := home.Set(ctx, "target", 22); err != nil {
		t.Fatal(err)
	}
	reply, err := s.Channel("page.ping").Request(ctx, "page", []byte("x"))
	if err != nil || string(reply.Payload()) != "pong x" {
		t.Fatalf("ping: %v %v", reply, err)
	}
	awaitJS(t, b, "the example's later lines", `return docLog;`, func(all []string) error {
		later := strings.Join(all[len(want):], "\n")
		if !strings.Contains(later, "alert from billing.bus: disk full") || !strings.Contains(later, "change: target = 22 from billing") {
			return fmt.Errorf("logged after the example: %q", later)
		}
		return nil
	})
}

// fenced returns the fenced block that follows marker and opens with fence.
func fenced(t *testing.T, doc, marker, fence string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, marker)
	if !ok {
		t.Fatalf("docs/browser.md has no %q", marker)
	}
	_, rest, ok = strings.Cut(rest, fence+"\n")
	if !ok {
		t.Fatalf("no %s block after %q", fence, marker)
	}
	block, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatalf("the %s block after %q does not end", fence, marker)
	}
	return strings.TrimRight(block, "\n")
}

// Over TLS (--https): the page imports busbar.js over https and talks to
// the bus over wss, a request each way.
func TestBrowserOverTLS(t *testing.T) {
	b := startBrowserWith(t, browserConfig{tls: true})
	if !strings.HasPrefix(b.wsURL, "wss://") {
		t.Fatalf("ws URL %s", b.wsURL)
	}
	b.connectPage(t)
	goNode := testclient.Connect(t, b.bus, "gonode")
	ctx := ctxT(t)
	b.mustJS(t, nil, `await bus.channel("page.echo").handle((m) => "echo:" + m.text()); return null;`)
	reply, err := goNode.Scope("t").Channel("page.echo").Request(ctx, "page", []byte("over tls"))
	if err != nil || string(reply.Payload()) != "echo:over tls" {
		t.Fatalf("request to the page over wss: %v %v", reply, err)
	}
	if _, err := goNode.Scope("t").Channel("go.upper").Handle(ctx, func(_ context.Context, m *client.Message) ([]byte, error) {
		return []byte(strings.ToUpper(string(m.Payload()))), nil
	}); err != nil {
		t.Fatal(err)
	}
	var got string
	b.mustJS(t, &got, `return (await bus.channel("go.upper").request("gonode", "secure")).text();`)
	if got != "SECURE" {
		t.Fatalf("the page's request over wss: %q", got)
	}
}

// TestBrowserPageJoinsAServiceGroup: a page announces a service with a
// group beside a Go node of the same group, and requests to the bare
// service name are shared between the two; withdrawn, the Go node takes
// them all.
func TestBrowserPageJoinsAServiceGroup(t *testing.T) {
	b, goNode, ctx := pageAndGoNode(t, "gonode")
	var rec map[string]any
	b.mustJS(t, &rec, `
		await bus.channel("page.echo").handle(() => "page");
		return await bus.announce({service: "echoer", group: "pool", channels: ["page.echo"]});`)
	if rec["group"] != "pool" || rec["address"] != "echoer.page.bus" || rec["collision"] == true {
		t.Fatalf("the page's announcement: %v", rec)
	}
	if _, err := goNode.Scope("t").Channel("page.echo").Handle(ctx, func(context.Context, *client.Message) ([]byte, error) { return []byte("go"), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := goNode.Announce(ctx, wire.Announcement{Service: "echoer", Group: "pool", Channels: []string{"page.echo"}}); err != nil {
		t.Fatal(err)
	}
	caller := testclient.Connect(t, b.bus, "caller")
	got := map[string]int{}
	for range 10 {
		m, err := caller.Scope("t").Channel("page.echo").Request(ctx, "echoer", nil)
		if err != nil {
			t.Fatal(err)
		}
		got[string(m.Payload())]++
	}
	if got["page"] != 5 || got["go"] != 5 {
		t.Fatalf("10 requests to the group: %v", got)
	}
	b.mustJS(t, nil, `await bus.withdraw("echoer"); return null;`)
	for range 4 {
		if m, err := caller.Scope("t").Channel("page.echo").Request(ctx, "echoer", nil); err != nil || string(m.Payload()) != "go" {
			t.Fatalf("after the page withdrew: %v %v", m, err)
		}
	}
}

// TestBrowserPageJoinsAQueue: a page and a Go node in one queue share 10
// publications, 5 each, every one once; a plain subscription beside the
// queue's, a second queue on the channel and a queue name that is no
// label are refused.
func TestBrowserPageJoinsAQueue(t *testing.T) {
	b, goNode, ctx := pageAndGoNode(t, "gonode")
	b.mustJS(t, nil, `window.jobs = []; await bus.channel("page.jobs").queueSubscribe("crew", (m) => jobs.push(m.text())); return null;`)
	var goJobs []string
	var mu sync.Mutex
	if _, err := goNode.Scope("t").Channel("page.jobs").QueueSubscribe(ctx, "crew", func(_ context.Context, m *client.Message) {
		mu.Lock()
		defer mu.Unlock()
		goJobs = append(goJobs, string(m.Payload()))
	}); err != nil {
		t.Fatal(err)
	}
	var refused map[string]any
	for _, call := range []string{`bus.channel("page.jobs").subscribe(() => {})`, `bus.channel("page.jobs").queueSubscribe("other", () => {})`, `bus.channel("page.more").queueSubscribe("Not A Label", () => {})`} {
		b.mustJS(t, &refused, `try { await %s; return {}; } catch (e) { return {kind: e.kind}; }`, call)
		if refused["kind"] != "REJECTED" {
			t.Errorf("%s: %v", call, refused)
		}
	}
	pub := testclient.Connect(t, b.bus, "pub").Scope("t").Channel("page.jobs")
	for i := range 10 {
		if _, err := pub.Publish(ctx, []byte(fmt.Sprint("j", i))); err != nil {
			t.Fatal(err)
		}
	}
	awaitJS(t, b, "the page's share", `return jobs;`, func(page []string) error {
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]int{}
		for _, j := range append(slices.Clone(page), goJobs...) {
			seen[j]++
		}
		if len(page) != 5 || len(goJobs) != 5 || len(seen) != 10 {
			return fmt.Errorf("the page got %v, the Go node %v", page, goJobs)
		}
		return nil
	})
}
