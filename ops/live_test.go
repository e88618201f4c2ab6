package ops_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
	"busbar/ops"
)

// dialLive opens the live feed of srv with query (the token's part).
func dialLive(ctx context.Context, srvURL, query string) (*websocket.Conn, *http.Response, error) {
	return websocket.Dial(ctx, "ws"+strings.TrimPrefix(srvURL, "http")+ops.LivePath+query, nil)
}

func TestLiveFeedPushesFramesWithNewEventsOnly(t *testing.T) {
	e := testbroker.Start(t, "inproc", broker.Options{})
	srv := opsServer(t, e, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	owner := testclient.Connect(t, e, "owner")
	if _, err := owner.State("inventory").Set(ctx, "widgets", 3); err != nil {
		t.Fatal(err)
	}
	c, _, err := dialLive(ctx, srv.URL, "?token="+testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	var f ops.LiveFrame
	if err := wsjson.Read(ctx, c, &f); err != nil {
		t.Fatal(err)
	}
	if f.Status.Broker != e.Broker.Name() || len(f.Events) != 1 || f.Events[0].Key != "widgets" ||
		len(f.Keys["inventory"]) != 1 || f.Keys["inventory"][0].Value != "3" {
		t.Fatalf("first frame: %+v", f)
	}
	if _, err := owner.State("inventory").Set(ctx, "gadgets", 1); err != nil {
		t.Fatal(err)
	}
	// The next frames carry only what is new: the second write, once.
	var seen []string
	for len(seen) == 0 {
		if err := wsjson.Read(ctx, c, &f); err != nil {
			t.Fatal(err)
		}
		for _, ev := range f.Events {
			seen = append(seen, ev.Key)
		}
	}
	if len(seen) != 1 || seen[0] != "gadgets" {
		t.Fatalf("events after the first frame: %v", seen)
	}
	// The broker shutting down ends the feed.
	if err := e.Broker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		err := wsjson.Read(ctx, c, &f)
		if err == nil {
			continue
		}
		if websocket.CloseStatus(err) != websocket.StatusGoingAway {
			t.Fatalf("the feed ended with %v, want going away", err)
		}
		break
	}
}

func TestLiveFeedRefusesWithoutTheTokenAndFromAnotherOrigin(t *testing.T) {
	e := testbroker.Start(t, "inproc", broker.Options{})
	srv := opsServer(t, e, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, q := range []string{"", "?token=wrong"} {
		c, resp, err := dialLive(ctx, srv.URL, q)
		if err == nil {
			c.CloseNow()
			t.Fatalf("the feed opened with %q", q)
		}
		if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("with %q: %v %v, want 401", q, resp, err)
		}
	}
	// With the token but from another site's page: refused.
	h := http.Header{"Origin": []string{"http://evil.example"}}
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+ops.LivePath+"?token="+testToken, &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		c.CloseNow()
		t.Fatal("the feed opened for another origin")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another origin: %v %v, want 403", resp, err)
	}
}

func TestLiveFeedServesAtMostMaxLiveClients(t *testing.T) {
	e := testbroker.Start(t, "inproc", broker.Options{})
	srv := opsServer(t, e, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var open []*websocket.Conn
	defer func() {
		for _, c := range open {
			c.CloseNow()
		}
	}()
	for range ops.MaxLiveClients {
		c, _, err := dialLive(ctx, srv.URL, "?token="+testToken)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	c, resp, err := dialLive(ctx, srv.URL, "?token="+testToken)
	if err == nil {
		c.CloseNow()
		t.Fatalf("feed %d opened", ops.MaxLiveClients+1)
	}
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("feed %d: %v %v, want 503", ops.MaxLiveClients+1, resp, err)
	}
	// One leaves: there is room again (once its handler noticed).
	open[0].CloseNow()
	open = open[1:]
	testbroker.Await(t, 10*time.Second, "room for a feed", func() error {
		c, _, err := dialLive(ctx, srv.URL, "?token="+testToken)
		if err != nil {
			return err
		}
		open = append(open, c)
		return nil
	})
}

// A page that does not read its feed is closed within liveWriteTimeout
// (5 s) of a frame, not once the socket buffers have filled: its pong
// never comes. Pages that never read take every place; each is freed.
func TestLiveFeedClosesAPageThatDoesNotRead(t *testing.T) {
	e := testbroker.Start(t, "inproc", broker.Options{})
	srv := opsServer(t, e, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var open []*websocket.Conn
	defer func() {
		for _, c := range open {
			c.CloseNow()
		}
	}()
	for range ops.MaxLiveClients { // never read: no pong is ever sent
		c, _, err := dialLive(ctx, srv.URL, "?token="+testToken)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	start := time.Now()
	testbroker.Await(t, 15*time.Second, "a place freed by a page that does not read", func() error {
		c, _, err := dialLive(ctx, srv.URL, "?token="+testToken)
		if err != nil {
			return err
		}
		open = append(open, c)
		return nil
	})
	t.Logf("a place was free after %v", time.Since(start).Round(100*time.Millisecond))
}
