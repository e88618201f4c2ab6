package ops

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"busbar/broker"
)

// The dashboard's live feed: a WebSocket at LivePath (token required,
// same origin only) on which the broker pushes a LiveFrame every
// LiveInterval. The page does not join the bus as a node: what it shows
// (every node's traffic, every namespace, every refusal) is more than any
// bus principal may see, and an operator's page should not appear among
// the nodes it watches. docs/operations.md#the-dashboard.

// LivePath is the dashboard's feed.
const LivePath = "/api/live"

// LiveInterval is how often the feed pushes a frame.
const LiveInterval = time.Second

// MaxLiveClients bounds the feeds served at once (each costs a status
// read per LiveInterval); one more is refused with 503.
const MaxLiveClients = 16

// LiveMaxKeys bounds the keys a frame lists per namespace; a larger
// namespace is shown by its count only.
const LiveMaxKeys = 100

// liveProbeEvery is how often a feed probes the data directory for its
// readiness (a file written and synced: not every second), unless the
// broker is shutting down, which every frame says at once.
const liveProbeEvery = 10 * time.Second

// liveWriteTimeout bounds how long a frame, and the pong that says the
// page read it, may take before the feed is closed.
const liveWriteTimeout = 5 * time.Second

// LiveFrame is one push of the feed.
type LiveFrame struct {
	Time   time.Time `json:"time"`
	Status Status    `json:"status"`
	// Keys lists the keys of each namespace of at most LiveMaxKeys keys.
	Keys map[string][]broker.KeyInfo `json:"keys"`
	// Events are the broker's events (state changes, refusals, delivery
	// issues) since the previous frame; the first frame has every kept one.
	Events []broker.Event `json:"events"`
	// Samples are the broker's history samples (broker.HistoryInterval
	// apart) since the previous frame's; the first frame has every kept
	// one, so the page's charts show the last minutes at once.
	Samples []broker.Sample `json:"samples"`
}

// liveFeeds counts the feeds being served.
type liveFeeds struct{ n atomic.Int32 }

func (o Options) live(feeds *liveFeeds) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if feeds.n.Add(1) > MaxLiveClients {
			feeds.n.Add(-1)
			http.Error(w, "busbar: too many live dashboards open (at most "+strconv.Itoa(MaxLiveClients)+")", http.StatusServiceUnavailable)
			return
		}
		defer feeds.n.Add(-1)
		// Same origin only (the default): another site's page cannot read
		// the feed even with a token it stole.
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return // Accept answered
		}
		defer c.CloseNow()
		o.feed(c.CloseRead(r.Context()), c)
	}
}

// feed pushes frames until the page leaves, a write fails, or the broker
// shuts down (a hijacked connection outlives http.Server.Shutdown, so the
// feed ends itself).
func (o Options) feed(ctx context.Context, c *websocket.Conn) {
	tick := time.NewTicker(LiveInterval)
	defer tick.Stop()
	var (
		after    uint64
		sampled  time.Time // the last sample sent
		probed   time.Time
		notReady error
	)
	for {
		if err := o.Broker.Ready(); err != nil || time.Since(probed) >= liveProbeEvery {
			notReady, probed = o.notReady(), time.Now()
		}
		f := o.liveFrame(&after, &sampled, notReady)
		// The frame, then a ping whose pong must come back within
		// liveWriteTimeout: socket buffers would take many frames from a
		// page that does not read before a write blocked, but the pong
		// comes only from a page that reads.
		wctx, cancel := context.WithTimeout(ctx, liveWriteTimeout)
		err := wsjson.Write(wctx, c, f)
		if err == nil {
			err = c.Ping(wctx)
		}
		cancel()
		if err != nil {
			return
		}
		if o.Broker.Ready() != nil {
			_ = c.Close(websocket.StatusGoingAway, "the broker is shutting down")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// liveFrame reads a frame; after is the last event sent and sampled the
// last sample's time, both advanced.
func (o Options) liveFrame(after *uint64, sampled *time.Time, notReady error) LiveFrame {
	f := LiveFrame{Time: time.Now(), Status: o.readStatus(notReady), Keys: map[string][]broker.KeyInfo{}, Events: o.Broker.Events(*after)}
	if n := len(f.Events); n > 0 {
		*after = f.Events[n-1].Seq
	}
	f.Samples = []broker.Sample{}
	for _, s := range o.Broker.History() {
		if s.Time.After(*sampled) {
			f.Samples = append(f.Samples, s)
		}
	}
	if n := len(f.Samples); n > 0 {
		*sampled = f.Samples[n-1].Time
	}
	for _, ns := range f.Status.Namespaces {
		if keys, ok := o.Broker.NamespaceKeys(ns.Name, LiveMaxKeys); ok {
			f.Keys[ns.Name] = keys
		}
	}
	return f
}
