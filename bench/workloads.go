package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"busbar/auth"
	"busbar/client"
	"busbar/loadgen"
	"busbar/wire"
)

// idleWait is how long a subscriber waits for stragglers before
// reporting, unless the plan says otherwise.
const idleWait = 2 * time.Second

// system is one side of the comparison, reached over one transport.
type system interface {
	name() string
	pubsub(ctx context.Context, subs, size int, msgs int64) (pub loadgen.Result, got []loadgen.Result, err error)
	request(ctx context.Context, concurrency, size int, msgs int64) (loadgen.Result, error)
	// workers is request with its requests shared by n interchangeable
	// responders: a service group on busbar, a queue group on NATS.
	workers(ctx context.Context, n, concurrency, size int, msgs int64) (loadgen.Result, error)
	idle(ctx context.Context, n int) (closeAll func(), err error)
	// freeze subscribes to pubsub's channel on a connection that then
	// never reads; closing it ends the subscription.
	freeze(ctx context.Context) (io.Closer, error)
	// spread publishes msgs in all over the connections and channels of
	// sh (workloads 12 and 13, scale.go).
	spread(ctx context.Context, sh shape, size int, msgs int64) (spreadRun, error)
	server() *child
}

// --- busbar ---------------------------------------------------------------

type busbarSystem struct {
	label, endpoint string
	cred            auth.Credential
	// far and farCred are the other broker of a bus (cluster.go), where
	// pubsub's subscribers and request's responder connect; empty: the
	// same broker.
	far      string
	farCred  auth.Credential
	srv      *child
	straggle time.Duration // a subscriber's wait for stragglers
}

// nodeSeq numbers the harness's nodes: a name is never reused, so no
// connection replaces another's, on one broker or on a bus.
var nodeSeq atomic.Int64

func (s *busbarSystem) name() string   { return s.label }
func (s *busbarSystem) server() *child { return s.srv }

func (s *busbarSystem) connect(ctx context.Context, tune func(*client.Options)) (*client.Client, error) {
	return s.dial(ctx, s.endpoint, s.cred, tune)
}

// connectFar connects on the far side: the other broker of a bus.
func (s *busbarSystem) connectFar(ctx context.Context, tune func(*client.Options)) (*client.Client, error) {
	if s.far == "" {
		return s.connect(ctx, tune)
	}
	return s.dial(ctx, s.far, s.farCred, tune)
}

func (s *busbarSystem) dial(ctx context.Context, endpoint string, cred auth.Credential, tune func(*client.Options)) (*client.Client, error) {
	opts := client.Options{Server: endpoint, Node: fmt.Sprintf("n%d", nodeSeq.Add(1)), Credential: cred}
	if tune != nil {
		tune(&opts)
	}
	return client.Connect(ctx, opts)
}

func (s *busbarSystem) pubsub(ctx context.Context, subs, size int, msgs int64) (loadgen.Result, []loadgen.Result, error) {
	cfg := loadgen.Config{Channel: "bench.flow", Size: size, Msgs: msgs}
	var counters []*loadgen.Subscriber
	var clients []*client.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range subs {
		// One delivery goroutine per subscriber, as nats.go has per
		// asynchronous subscription, and a dispatch queue that holds the
		// whole run, as the NATS side's pending limits are lifted: both
		// count what reaches the callback, neither drops on the client
		// side. (At 65,536 a TCP run now and then lost a few per cent
		// there, when the reader outran the one worker.)
		c, err := s.connectFar(ctx, func(o *client.Options) {
			o.DispatchQueue = max(1<<16, int(msgs))
			o.MaxQueueBytes = 64 << 20
			o.Workers = 1
		})
		if err != nil {
			return loadgen.Result{}, nil, err
		}
		clients = append(clients, c)
		sub, err := loadgen.Subscribe(ctx, c, cfg, msgs)
		if err != nil {
			return loadgen.Result{}, nil, err
		}
		counters = append(counters, sub)
	}
	pub, err := s.connect(ctx, nil)
	if err != nil {
		return loadgen.Result{}, nil, err
	}
	if err := s.awaitFar(ctx, pub, clients, func(n wire.NodeInfo) bool { return len(n.Subscriptions) > 0 }); err != nil {
		pub.Close()
		return loadgen.Result{}, nil, err
	}
	clients = append(clients, pub)
	res, err := loadgen.Publish(ctx, []*client.Client{pub}, cfg)
	if err != nil {
		return res, nil, err
	}
	var got []loadgen.Result
	for i, sub := range counters {
		r := sub.Wait(ctx, s.straggle)
		r.Errors = clients[i].Dropped() // what its own dispatch queue had no room for
		got = append(got, r)
	}
	return res, got, nil
}

func (s *busbarSystem) request(ctx context.Context, concurrency, size int, msgs int64) (loadgen.Result, error) {
	rep, err := s.connectFar(ctx, func(o *client.Options) { o.Workers = max(2, concurrency) })
	if err != nil {
		return loadgen.Result{}, err
	}
	defer rep.Close()
	if _, err := loadgen.Echo(ctx, rep, "bench.req"); err != nil {
		return loadgen.Result{}, err
	}
	req, err := s.connect(ctx, nil)
	if err != nil {
		return loadgen.Result{}, err
	}
	defer req.Close()
	if err := s.awaitFar(ctx, req, []*client.Client{rep}, func(n wire.NodeInfo) bool { return len(n.Handlers) > 0 }); err != nil {
		return loadgen.Result{}, err
	}
	return loadgen.Request(ctx, []*client.Client{req}, rep.Node(), concurrency, loadgen.Config{Channel: "bench.req", Size: size, Msgs: msgs})
}

// workerService is the service workload 15's workers announce together.
const workerService = "bench-workers"

func (s *busbarSystem) workers(ctx context.Context, n, concurrency, size int, msgs int64) (loadgen.Result, error) {
	var ws []*client.Client
	defer func() {
		for _, w := range ws {
			w.Close()
		}
	}()
	for range n {
		w, err := s.connectFar(ctx, func(o *client.Options) { o.Workers = max(2, concurrency/n) })
		if err != nil {
			return loadgen.Result{}, err
		}
		ws = append(ws, w)
		if _, err := loadgen.Echo(ctx, w, "bench.req"); err != nil {
			return loadgen.Result{}, err
		}
		if _, err := w.Announce(ctx, wire.Announcement{Service: workerService, Group: "bench", Channels: []string{"bench.req"}}); err != nil {
			return loadgen.Result{}, err
		}
	}
	req, err := s.connect(ctx, nil)
	if err != nil {
		return loadgen.Result{}, err
	}
	defer req.Close()
	for deadline := time.Now().Add(busSettle); ; time.Sleep(5 * time.Millisecond) { // every member known to the requester's broker
		list, err := req.Whois(ctx, workerService)
		if err != nil {
			return loadgen.Result{}, err
		}
		if len(list) == n {
			break
		}
		if time.Now().After(deadline) {
			return loadgen.Result{}, fmt.Errorf("%s: %d of %d workers in the registry", s.label, len(list), n)
		}
	}
	return loadgen.Request(ctx, []*client.Client{req}, workerService, concurrency, loadgen.Config{Channel: "bench.req", Size: size, Msgs: msgs})
}

func (s *busbarSystem) idle(ctx context.Context, n int) (func(), error) {
	var cs []*client.Client
	closeAll := func() {
		for _, c := range cs {
			c.Close()
		}
	}
	for range n {
		c, err := s.connect(ctx, nil)
		if err != nil {
			closeAll()
			return nil, err
		}
		cs = append(cs, c)
	}
	return closeAll, nil
}

// --- NATS -------------------------------------------------------------------

type natsSystem struct {
	url string
	// far is another server of a NATS cluster (cluster.go), where pubsub's
	// subscribers and request's responder connect; empty: the same server.
	far      string
	jsURL    string // the JetStream server of workload 8 ("" when not started)
	srv      *child
	straggle time.Duration // a subscriber's wait for stragglers
}

func (s *natsSystem) name() string   { return "nats-tcp" }
func (s *natsSystem) server() *child { return s.srv }

func (s *natsSystem) connect() (*nats.Conn, error) { return s.dial(s.url) }

// connectFar connects on the far side: another server of the cluster.
func (s *natsSystem) connectFar() (*nats.Conn, error) { return s.dial(cmp.Or(s.far, s.url)) }

func (s *natsSystem) dial(url string) (*nats.Conn, error) {
	return nats.Connect(url, nats.UserInfo(natsUser, natsPass), nats.MaxReconnects(0))
}

func (s *natsSystem) pubsub(ctx context.Context, subs, size int, msgs int64) (loadgen.Result, []loadgen.Result, error) {
	var conns []*nats.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var counters []*tally
	for range subs {
		nc, err := s.connectFar()
		if err != nil {
			return loadgen.Result{}, nil, err
		}
		conns = append(conns, nc)
		k := newTally(msgs)
		sub, err := nc.Subscribe("bench.flow", func(m *nats.Msg) { k.add(m.Data) })
		if err != nil {
			return loadgen.Result{}, nil, err
		}
		_ = sub.SetPendingLimits(-1, -1) // count, never drop on the client side
		if err := nc.Flush(); err != nil {
			return loadgen.Result{}, nil, err
		}
		counters = append(counters, k)
	}
	pc, err := s.connect()
	if err != nil {
		return loadgen.Result{}, nil, err
	}
	if err := s.awaitFar(pc, conns); err != nil {
		pc.Close()
		return loadgen.Result{}, nil, err
	}
	conns = append(conns, pc)
	payload := make([]byte, size)
	start := time.Now()
	var sent int64
	for ; sent < msgs && ctx.Err() == nil; sent++ {
		loadgen.Stamp(payload)
		if err := pc.Publish("bench.flow", payload); err != nil {
			return loadgen.Result{}, nil, err
		}
	}
	_ = pc.Flush()
	pub := loadgen.NewResult("pub", sent, sent*int64(size), 0, time.Since(start), nil)
	var got []loadgen.Result
	for _, k := range counters {
		k.wait(ctx, s.straggle)
		got = append(got, k.result())
	}
	return pub, got, nil
}

// waitCount waits for done, ctx, or idle without progress.
func waitCount(ctx context.Context, done <-chan struct{}, got *atomic.Int64, idle time.Duration) {
	t := time.NewTicker(idle)
	defer t.Stop()
	last := int64(-1)
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			if n := got.Load(); n == last {
				return
			} else {
				last = n
			}
		}
	}
}

func (s *natsSystem) request(ctx context.Context, concurrency, size int, msgs int64) (loadgen.Result, error) {
	rep, err := s.connectFar()
	if err != nil {
		return loadgen.Result{}, err
	}
	defer rep.Close()
	if _, err := rep.Subscribe("bench.req", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		return loadgen.Result{}, err
	}
	if err := rep.Flush(); err != nil {
		return loadgen.Result{}, err
	}
	req, err := s.connect()
	if err != nil {
		return loadgen.Result{}, err
	}
	defer req.Close()
	if err := s.awaitFar(req, []*nats.Conn{rep}); err != nil {
		return loadgen.Result{}, err
	}
	return natsRequests(ctx, req, concurrency, size, msgs), nil
}

// natsRequests makes msgs requests on bench.req from concurrency
// goroutines sharing req, and reports their rate and round trips.
func natsRequests(ctx context.Context, req *nats.Conn, concurrency, size int, msgs int64) loadgen.Result {
	var lat loadgen.Recorder
	var done, errs atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for i := range concurrency {
		quota := shareOf(msgs, concurrency, i)
		wg.Go(func() {
			payload := make([]byte, size)
			for n := int64(0); n < quota && ctx.Err() == nil; n++ {
				t0 := time.Now()
				if _, err := req.Request("bench.req", payload, 10*time.Second); err != nil {
					errs.Add(1)
					continue
				}
				lat.Add(time.Since(t0))
				done.Add(1)
			}
		})
	}
	wg.Wait()
	n := done.Load()
	return loadgen.NewResult("req", n, 2*n*int64(size), errs.Load(), time.Since(start), lat.Summary())
}

func (s *natsSystem) workers(ctx context.Context, n, concurrency, size int, msgs int64) (loadgen.Result, error) {
	var ws []*nats.Conn
	defer func() {
		for _, w := range ws {
			w.Close()
		}
	}()
	for range n {
		w, err := s.connectFar()
		if err != nil {
			return loadgen.Result{}, err
		}
		ws = append(ws, w)
		if _, err := w.QueueSubscribe("bench.req", "bench", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
			return loadgen.Result{}, err
		}
		if err := w.Flush(); err != nil {
			return loadgen.Result{}, err
		}
	}
	req, err := s.connect()
	if err != nil {
		return loadgen.Result{}, err
	}
	defer req.Close()
	if err := s.awaitFar(req, ws); err != nil {
		return loadgen.Result{}, err
	}
	return natsRequests(ctx, req, concurrency, size, msgs), nil
}

func (s *natsSystem) idle(ctx context.Context, n int) (func(), error) {
	var cs []*nats.Conn
	closeAll := func() {
		for _, c := range cs {
			c.Close()
		}
	}
	for range n {
		c, err := s.connect()
		if err != nil {
			closeAll()
			return nil, err
		}
		cs = append(cs, c)
	}
	return closeAll, nil
}
