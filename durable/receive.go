package durable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"busbar/seal"

	bolt "go.etcd.io/bbolt"
)

// A Message is what the handler receives: a Sync message from a member.
type Message struct {
	ID    seal.MessageID // stable across redeliveries; dedupe by it, never by Body
	From  seal.Member    // From.ID() is the sender's device id, as in the manifest
	Group string
	Sent  time.Time // the sender timestamp, stamped once at Send
	Body  []byte
	// Attempt is which run of the handler this is for the message in
	// this session, from 1 to HandlerAttempts: a failure on the last one
	// drops the message with handlerGaveUp.
	Attempt int
}

// A Handler handles one message. It is awaited: the next message waits
// for it, and the blob is acked only after it returns nil (or after it
// failed HandlerAttempts times). The library sets no timeout; ctx ends
// when Run ends or the handler is cancelled.
type Handler func(ctx context.Context, m Message) error

type registration struct {
	h      Handler
	ctx    context.Context
	cancel context.CancelFunc
}

// OnMessage registers the device's one handler; receiving starts when
// it is registered (Run pulls nothing before). A second call while one is
// registered fails with ErrHandlerAlreadySet. cancel unregisters it: Run
// stops pulling (a handler running is cancelled through its ctx, and its
// blob comes again on the next session) and waits for a new handler.
func (d *Device) OnMessage(h Handler) (cancel func(), err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if d.handler != nil {
		return nil, ErrHandlerAlreadySet
	}
	ctx, stop := context.WithCancel(context.Background())
	reg := &registration{h: h, ctx: ctx, cancel: stop}
	d.setHandler(reg)
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		stop()
		if d.handler == reg {
			d.setHandler(nil)
		}
	}, nil
}

func (d *Device) setHandler(reg *registration) { // d.mu held
	d.handler = reg
	close(d.regCh)
	d.regCh = make(chan struct{})
}

// waitHandler returns the registered handler, waiting for one.
func (d *Device) waitHandler(ctx context.Context) (*registration, error) {
	for {
		d.mu.Lock()
		reg, ch, closed := d.handler, d.regCh, d.closed
		d.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if reg != nil {
			return reg, nil
		}
		select {
		case <-ch:
		case <-d.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Run receives this device's messages from r until ctx ends, the device
// is closed (ErrClosed) or the relay fails (its error: reconnect and call
// Run again). It opens a receive session only once a handler is
// registered, and handles one blob at a time (docs/durable.md, "The
// recipient").
func (d *Device) Run(ctx context.Context, r Relay) error { return d.run(ctx, r, nil) }

// run is Run, calling done (if set) once each message was handled or
// given up and its blob acked.
func (d *Device) run(ctx context.Context, r Relay, done func(Message, error)) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	d.runs.Add(1)
	d.mu.Unlock()
	defer d.runs.Done()
	for {
		reg, err := d.waitHandler(ctx)
		if err != nil {
			return err
		}
		sctx, stop := context.WithCancel(ctx)
		unReg := context.AfterFunc(reg.ctx, stop)
		unClose := context.AfterFunc(d.life, stop)
		err = d.session(sctx, r, reg.h, done)
		unReg()
		unClose()
		stop()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case d.isClosed():
			return ErrClosed
		case reg.ctx.Err() != nil:
			continue // cancelled: wait for the next handler
		}
		return err
	}
}

func (d *Device) session(ctx context.Context, r Relay, h Handler, done func(Message, error)) error {
	s, err := r.Receive(ctx, d.me)
	if err != nil {
		return err
	}
	for {
		seq, blob, err := s.Next(ctx)
		if err != nil {
			return err
		}
		if err := d.handleBlob(ctx, s, seq, blob, h, done); err != nil {
			return err
		}
	}
}

// handleBlob takes one blob through the seed's steps. An error means the
// session must end with the blob unacked (a crash, the device's store, the
// relay).
func (d *Device) handleBlob(ctx context.Context, s Session, seq uint64, blob []byte, h Handler, done func(Message, error)) error {
	// 1. The end-to-end version.
	v, err := seal.PeekVersion(blob)
	if err != nil {
		return d.dropBlob(ctx, s, seq, Event{Kind: EventDeliveryIssue, Reason: ReasonMalformed, Err: err.Error()})
	}
	var newer seal.ErrVersionNewer
	var older seal.ErrVersionOlder
	switch err := seal.CheckVersion(v); {
	case errors.As(err, &newer):
		return d.hold(ctx, s, seq, v)
	case errors.As(err, &older):
		return d.dropBlob(ctx, s, seq, Event{Kind: EventUnreadable, Reason: ReasonSenderOutdated, Version: v})
	}
	// 2. Open (seal, signature, membership), then the replay window, for
	// Sync messages: control messages never expire.
	in, err := seal.Open(d.me, blob, d.senders())
	var us *seal.UnknownSenderError
	if errors.As(err, &us) && keepable(us.Kind) && us.Epoch > 0 {
		return d.keepUnknownSigner(ctx, s, seq, blob, us)
	}
	if err != nil {
		ev := Event{Kind: EventDeliveryIssue, Reason: issueReason(err), Err: err.Error()}
		if me := (*seal.MessageError)(nil); errors.As(err, &me) { // opened, then refused: name the message
			ev.MessageID, ev.Group, ev.Peer = me.ID, me.Group, me.Sender.String()
		}
		return d.dropBlob(ctx, s, seq, ev)
	}
	if in.Kind == seal.KindSync && d.now().Sub(in.Timestamp) > ReplayWindow {
		return d.dropBlob(ctx, s, seq, Event{Kind: EventUnreadable, Reason: ReasonExpired, MessageID: in.ID, Group: in.Group, Peer: in.Sender.String()})
	}
	if in.Kind.Control() {
		return d.control(ctx, s, seq, blob, in)
	}
	// 3. The dedup table.
	dup, err := d.seen(in)
	if err != nil {
		return err
	}
	if dup {
		return d.ack(ctx, s, seq)
	}
	// 4. The handler, awaited, 5 attempts.
	m, err := d.readGroup(in.Group)
	if err != nil {
		return err
	}
	from, ok := m.Member(in.Sender)
	if !ok { // removed between Open and here by another process
		return d.dropBlob(ctx, s, seq, Event{Kind: EventDeliveryIssue, Reason: ReasonUnknownSender, MessageID: in.ID, Group: in.Group, Peer: in.Sender.String()})
	}
	msg := Message{ID: in.ID, From: from, Group: in.Group, Sent: in.Timestamp, Body: in.Body}
	if herr := d.runHandler(ctx, h, msg); herr != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err := d.dropBlob(ctx, s, seq, Event{Kind: EventHandlerGaveUp, MessageID: in.ID, Group: in.Group, Peer: in.Sender.String(), Err: herr.Error()})
		if err == nil && done != nil {
			done(msg, herr)
		}
		return err
	}
	// 5. Record the id, then ack.
	if err := d.fail(FailRecipientBeforeDedup); err != nil {
		return err
	}
	if err := d.update(func(tx *bolt.Tx) error { return d.record(tx, in, seq) }); err != nil {
		return err
	}
	if err := d.ack(ctx, s, seq); err != nil {
		return err
	}
	if done != nil {
		done(msg, nil)
	}
	return nil
}

// runHandler runs h up to HandlerAttempts times, waiting HandlerBackoff,
// then twice that, … between attempts. It returns the last error. A
// panic in h is a failure like a returned error (the seed's "throws"),
// its text the panic's value.
func (d *Device) runHandler(ctx context.Context, h Handler, m Message) error {
	wait := d.opts.HandlerBackoff
	var err error
	for attempt := 1; ; attempt++ {
		m.Attempt = attempt
		if err = callHandler(ctx, h, m); err == nil {
			return nil
		}
		if attempt == HandlerAttempts || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait *= 2
	}
}

// HandlerPanic is the error of a handler run that panicked: Value is what
// it panicked with.
type HandlerPanic struct{ Value any }

func (e *HandlerPanic) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// callHandler runs h once, turning a panic into a *HandlerPanic.
func callHandler(ctx context.Context, h Handler, m Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &HandlerPanic{Value: v}
		}
	}()
	return h(ctx, m)
}

func (d *Device) ack(ctx context.Context, s Session, seq uint64) error {
	if err := d.fail(FailRecipientBeforeAck); err != nil {
		return err
	}
	return s.Ack(ctx, seq)
}

// dropBlob raises ev and acks the blob.
func (d *Device) dropBlob(ctx context.Context, s Session, seq uint64, ev Event) error {
	ev.RelaySeq = seq
	err := d.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bHeld).Delete(u64(seq)); err != nil {
			return err
		}
		return d.raise(tx, ev)
	})
	if err != nil {
		return err
	}
	return d.ack(ctx, s, seq)
}

// ReasonTooManyHeld is the unreadable reason of a newer-version blob
// that finds Options.MaxHeld blobs already held: it is acked and dropped.
const ReasonTooManyHeld = "tooManyHeld"

// hold leaves a blob of a newer end-to-end version unacked and records it,
// raising heldForUpgrade the first time. Past MaxHeld blobs, it is acked
// and dropped as unreadable(tooManyHeld).
func (d *Device) hold(ctx context.Context, s Session, seq uint64, v uint16) error {
	over := false
	err := d.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bHeld)
		if b.Get(u64(seq)) != nil {
			return nil // held already: seen again on a new session
		}
		if err := forgetStaleHeld(b, d.now()); err != nil {
			return err
		}
		if countKeys(b) >= d.opts.MaxHeld {
			over = true
			return nil
		}
		val := append(u64(uint64(d.now().UnixMilli())), byte(v>>8), byte(v))
		if err := b.Put(u64(seq), val); err != nil {
			return err
		}
		return d.raise(tx, Event{Kind: EventHeldForUpgrade, Version: v, RelaySeq: seq})
	})
	if err != nil || !over {
		return err
	}
	return d.dropBlob(ctx, s, seq, Event{Kind: EventUnreadable, Reason: ReasonTooManyHeld, Version: v})
}

// Held returns how many blobs of a newer version are held unacked.
func (d *Device) Held() (n int, err error) {
	err = d.view(func(tx *bolt.Tx) error {
		n = countKeys(tx.Bucket(bHeld))
		return nil
	})
	return n, err
}

// senders finds a sender's key in the manifest this device holds for the
// message's group, read when the blob is opened; for a group it asked to
// join and is not yet in, the token's inviter is the one sender it knows.
func (d *Device) senders() seal.Senders { return d.sendersWith(d.PendingJoin) }

// sendersTx is senders within tx, which holds device.db's lock.
func (d *Device) sendersTx(tx *bolt.Tx) seal.Senders {
	return d.sendersWith(func(group string) (*seal.Token, error) { return pendingJoin(tx, group) })
}

func (d *Device) sendersWith(joinOf func(group string) (*seal.Token, error)) seal.Senders {
	return seal.SendersFunc(func(group string, id seal.DeviceID) (seal.Public, bool) {
		m, err := d.readGroup(group)
		if err != nil {
			return seal.Public{}, false
		}
		if m != nil {
			if p, ok := m.SenderKey(group, id); ok || m.Has(d.ID()) {
				return p, ok
			}
		}
		tok, err := joinOf(group)
		if err != nil || tok == nil {
			return seal.Public{}, false
		}
		return tok.SenderKey(group, id)
	})
}

// issueReason names a failure of Open or of a control message.
func issueReason(err error) string {
	for _, r := range []struct {
		err  error
		name string
	}{
		{seal.ErrMalformed, "malformed"},
		{seal.ErrNotForMe, "notForMe"},
		{seal.ErrBadSeal, "badSeal"},
		{seal.ErrUnknownSender, ReasonUnknownSender},
		{seal.ErrBadSignature, "badSignature"},
		{seal.ErrUnauthorizedSigner, "unauthorizedSigner"},
		{seal.ErrWrongGroup, "wrongGroup"},
		{seal.ErrBadChange, "badChange"},
		{seal.ErrNotMember, "notMember"},
		{seal.ErrBadProof, "badProof"},
		{seal.ErrTokenExpired, "tokenExpired"},
		{seal.ErrAlreadyMember, "alreadyMember"},
		{seal.ErrTooManyMembers, "tooManyMembers"},
		{seal.ErrStaleManifest, "staleManifest"},
	} {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "other"
}

// control applies a control message with the library as the handler: no
// dedup lookup, since a replay changes nothing (a manifest whose epoch is
// not newer is refused, ErrStaleManifest, and acked without an event; a
// Pair for a token already used by its joiner is acked too). A Pair is
// the inviter's (acceptPair); the first manifest of a group this device
// joined is checked against the token (applyInvited). A Leave or Revoke
// made on a manifest not received yet is kept (pending.go); the manifest
// accepted is held with setGroup, which retries the kept ones.
func (d *Device) control(ctx context.Context, s Session, seq uint64, blob []byte, in seal.Inner) error {
	if in.Kind == seal.KindPair {
		return d.acceptPair(ctx, s, seq, in)
	}
	var issue error
	reason := ""
	err := d.update(func(tx *bolt.Tx) error {
		cur, err := d.readGroup(in.Group)
		if err != nil {
			return err
		}
		next, invited, err := d.applyManifest(tx, cur, in)
		if epoch, ahead := skipsAhead(cur, in, err); ahead {
			p := pendingManifest{seq: seq, epoch: epoch, kind: in.Kind, sender: in.Sender, id: in.ID, blob: blob}
			if reason, err = d.keep(tx, in.Group, p); reason != "" {
				issue = fmt.Errorf("durable: %d manifests kept already: %s message %s not kept", d.opts.MaxPendingManifests, in.Kind, in.ID)
			}
			return err
		}
		if errors.Is(err, seal.ErrStaleManifest) {
			return nil
		}
		if err != nil {
			issue, reason = err, issueReason(err)
			return nil
		}
		if err := d.fail(FailRecipientBeforeDedup); err != nil {
			return err
		}
		if invited {
			if err := tx.Bucket(bJoins).Delete([]byte(in.Group)); err != nil {
				return err
			}
		}
		return d.setGroup(tx, next)
	})
	if err != nil {
		return err
	}
	if issue != nil {
		return d.dropBlob(ctx, s, seq, Event{Kind: EventDeliveryIssue, Reason: reason, MessageID: in.ID, Group: in.Group, Peer: in.Sender.String(), Err: issue.Error()})
	}
	return d.ack(ctx, s, seq)
}

// dedupKey is sender | message id: ids are random, and keying by sender
// too means one member cannot shadow another's message by reusing its id.
func dedupKey(in seal.Inner) []byte {
	return append(append([]byte(nil), in.Sender[:]...), in.ID[:]...)
}

// seen reports whether in's id is in the dedup table and still kept.
func (d *Device) seen(in seal.Inner) (dup bool, err error) {
	err = d.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bDedup).Get(dedupKey(in))
		dup = len(v) == 8 && !d.now().After(unixMilli(v))
		return nil
	})
	return dup, err
}

// record writes in's id to the dedup table, kept until ReplayWindow after
// the later of now and its sender timestamp, forgets the blob if it was
// held, and deletes some dedup and token records past their time.
func (d *Device) record(tx *bolt.Tx, in seal.Inner, seq uint64) error {
	now := d.now()
	until := now
	if in.Timestamp.After(until) {
		until = in.Timestamp
	}
	until = until.Add(ReplayWindow)
	key := dedupKey(in)
	ms := u64(uint64(until.UnixMilli()))
	dd, de := tx.Bucket(bDedup), tx.Bucket(bDedupExp)
	if old := dd.Get(key); len(old) == 8 {
		if err := de.Delete(append(append([]byte(nil), old...), key...)); err != nil {
			return err
		}
	}
	if err := dd.Put(key, ms); err != nil {
		return err
	}
	if err := de.Put(append(ms, key...), nil); err != nil {
		return err
	}
	if err := tx.Bucket(bHeld).Delete(u64(seq)); err != nil {
		return err
	}
	if err := sweepDedup(tx, now); err != nil {
		return err
	}
	return sweepTokens(tx, now)
}

func sweepDedup(tx *bolt.Tx, now time.Time) error {
	return sweep(tx.Bucket(bDedupExp), tx.Bucket(bDedup), func(at []byte) bool { return now.After(unixMilli(at)) })
}

// sweep walks index, whose keys are a time (8 bytes) then the key of a
// record in data, oldest first, and deletes both while due says the time
// has come, at most sweepBatch of them.
func sweep(index, data *bolt.Bucket, due func(at []byte) bool) error {
	c := index.Cursor()
	for range sweepBatch {
		k, _ := c.First()
		if len(k) <= 8 || !due(k[:8]) {
			return nil
		}
		if err := data.Delete(k[8:]); err != nil {
			return err
		}
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// Dedup returns when the dedup record of (sender, id) goes, if there is one.
func (d *Device) Dedup(sender seal.DeviceID, id seal.MessageID) (until time.Time, ok bool, err error) {
	err = d.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bDedup).Get(dedupKey(seal.Inner{Sender: sender, ID: id}))
		if len(v) == 8 {
			until, ok = unixMilli(v), true
		}
		return nil
	})
	return until, ok, err
}

// countKeys counts a bucket's keys by walking it: Bucket.Stats does not
// see the writes of the transaction in progress.
func countKeys(b *bolt.Bucket) int {
	n := 0
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		n++
	}
	return n
}

// forgetStaleHeld deletes held records older than the relay's TTL (30
// days at most): the relay has deleted those blobs unacked, so they will
// never come again and must not count against MaxHeld.
func forgetStaleHeld(b *bolt.Bucket, now time.Time) error {
	var stale [][]byte
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(v) != 10 || now.Sub(unixMilli(v[:8])) > SyncTTL {
			stale = append(stale, bytes.Clone(k))
		}
	}
	for _, k := range stale {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
