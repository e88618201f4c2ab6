package broker

import (
	"context"
	"net"
	"time"

	"busbar/wire"
)

// sweep runs every sweepPeriod until Shutdown: it drops nodes whose lease
// expired, sends heartbeats on idle connections and closes calls whose
// deadline passed. A dead peer is therefore removed within LeaseTimeout +
// sweepPeriod.
func (b *Broker) sweep() { b.every(b.sweepPeriod(), b.sweepOnce) }

// every calls f every d until Shutdown: the body of the broker's periodic
// goroutines, which b.sweeper joins.
func (b *Broker) every(d time.Duration, f func(now time.Time)) {
	defer b.sweeper.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case now := <-t.C:
			f(now)
		}
	}
}

// sweepPeriod is sweepInterval, or less when heartbeats are more frequent,
// so a heartbeat is never late by more than half its interval.
func (b *Broker) sweepPeriod() time.Duration {
	return min(sweepInterval, b.opts.HeartbeatInterval/2, b.opts.ReceiptTimeout/2)
}

func (b *Broker) sweepOnce(now time.Time) {
	for _, c := range b.dir.all() {
		if c.inproc {
			continue // cannot die without the process
		}
		if c.active.Swap(false) {
			c.lastRead.Store(now.UnixNano())
		}
		if now.Sub(time.Unix(0, c.lastRead.Load())) > b.opts.LeaseTimeout {
			b.stats.leaseExpired.Add(1)
			b.events.add(Event{Kind: EventLease, Node: c.node})
			b.log.Warn("lease expired; dropping node", "node", c.node, "epoch", c.epoch)
			c.closeWith(wire.ResultLease, "no frame within the lease of "+b.opts.LeaseTimeout.String())
			b.retire(c) // now, not when its writer gives up on the dead peer
			continue
		}
		if b.owesReceiptsTooLong(c, now) {
			b.cutForReceipts(c)
			continue
		}
		if now.Sub(c.out.LastWrite()) >= b.opts.HeartbeatInterval {
			c.enqueue(wire.Empty(), time.Time{})
		}
	}
	b.expirePending(now)
	b.reg.retryLost()
	b.state.retryLost()
}

// draining reports whether Shutdown began: new work is refused.
func (b *Broker) draining() bool { return b.closing.Load() }

// Shutdown stops the broker gracefully: it stops accepting, tells every
// node (bus.goodbye), refuses new work, waits up to DrainTimeout (or ctx)
// for open requests to be answered, then closes every connection and waits
// for their goroutines. It returns ctx's error if ctx ended first.
func (b *Broker) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if b.closing.Load() {
		b.mu.Unlock()
		b.serving.Wait()
		return nil
	}
	b.closing.Store(true)
	lns := make([]net.Listener, 0, len(b.listeners))
	for ln := range b.listeners {
		lns = append(lns, ln)
	}
	b.mu.Unlock()
	for _, ln := range lns {
		_ = ln.Close()
	}
	bye := wire.New(wire.TypeEvent, wire.CmdGoodbye).WithHeader(wire.HeaderResult, string(wire.ResultShutdown))
	for _, c := range b.dir.all() {
		c.enqueue(bye, time.Time{})
	}
	drain, cancel := context.WithTimeout(ctx, b.opts.DrainTimeout)
	defer cancel()
	for b.pend.openRequests() > 0 && drain.Err() == nil {
		select {
		case <-drain.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	b.mu.Lock()
	conns := make([]*conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	for _, c := range conns {
		c.closeWith(wire.ResultShutdown, "broker shutting down")
	}
	b.cancel() // relay pushes and deliveries stop with their connections
	close(b.stop)
	b.sweeper.Wait()
	b.bus.leave() // the other brokers drop this one's nodes at once
	done := make(chan struct{})
	go func() {
		b.serving.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		for _, c := range conns {
			_ = c.nc.Close()
		}
		<-done
		err = ctx.Err()
	}
	// Nothing is served any more: the store can close.
	if cerr := b.state.close(); cerr != nil && err == nil {
		err = cerr
	}
	if cerr := b.relay.close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}
