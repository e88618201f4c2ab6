package durable

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"busbar/seal"

	bolt "go.etcd.io/bbolt"
)

// The kinds of delivery events (seed 001's names).
const (
	EventSendFailed     = "sendFailed"     // Reason: tooLarge, malformed, expired
	EventHeldForUpgrade = "heldForUpgrade" // Version: the blob's end-to-end version
	EventUnreadable     = "unreadable"     // Reason: senderOutdated, expired
	EventDeliveryIssue  = "deliveryIssue"  // Reason: what failed (see issueReason)
	EventHandlerGaveUp  = "handlerGaveUp"  // Err: the handler's last error
)

// Reasons of sendFailed and unreadable.
const (
	ReasonTooLarge       = "tooLarge"
	ReasonMalformed      = "malformed"
	ReasonExpired        = "expired"
	ReasonSenderOutdated = "senderOutdated"
	ReasonUnknownSender  = "unknownSender" // a deliveryIssue: the sender is not a member of the group held
)

// An Event is a delivery event: something the app is told and need not
// act on. Events are written to device.db in the transaction that decides
// them, so a process that is not listening (a send in another shell)
// leaves them for the one that is.
type Event struct {
	// Seq numbers the device's events in the order they were raised
	// (device.db's), so a reader can keep its place (Events, AckEvents).
	Seq       uint64 `json:"-"`
	Kind      string
	Time      time.Time      // the device's clock when it was raised
	MessageID seal.MessageID `json:",omitzero"` // zero when the blob did not open
	Group     string         `json:",omitempty"`
	Peer      string         `json:",omitempty"` // the recipient (sendFailed) or the sender (handlerGaveUp)
	Reason    string         `json:",omitempty"`
	Version   uint16         `json:",omitempty"` // heldForUpgrade
	Err       string         `json:",omitempty"` // handlerGaveUp, deliveryIssue: the error's text
	RelaySeq  uint64         `json:",omitempty"` // the blob's sequence on the relay (recipient events)
}

var (
	keyEventsDropped = []byte("eventsDropped")
	keyEventsCount   = []byte("eventsCount")
	// keyEventsShown is the seq of the last event Serve gave to its
	// OnEvent: a listener of the device starts after it.
	keyEventsShown = []byte("eventsShown")
)

// counter reads a count kept in the meta bucket.
func counter(meta *bolt.Bucket, key []byte) uint64 {
	if v := meta.Get(key); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// raise buffers ev in device.db within tx. Past Options.MaxEvents the
// oldest buffered event is deleted, and counted as dropped unless a
// listener was shown it (Events returns the count): a device nobody reads
// does not grow without bound.
func (d *Device) raise(tx *bolt.Tx, ev Event) error {
	d.changedIn(tx)
	ev.Time = d.now()
	b := tx.Bucket(bEvents)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	v, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if err := b.Put(u64(seq), v); err != nil {
		return err
	}
	meta := tx.Bucket(bMeta)
	n := counter(meta, keyEventsCount) + 1
	if n > uint64(d.opts.MaxEvents) {
		k, _ := b.Cursor().First()
		if err := b.Delete(k); err != nil {
			return err
		}
		n--
		if binary.BigEndian.Uint64(k) > counter(meta, keyEventsShown) {
			if err := meta.Put(keyEventsDropped, u64(counter(meta, keyEventsDropped)+1)); err != nil {
				return err
			}
		}
	}
	return meta.Put(keyEventsCount, u64(n))
}

// Events returns the buffered events raised after seq after (0: all of
// them), oldest first, without removing them: reading them is not
// consuming them (AckEvents is). dropped is how many were deleted before
// anyone read them, the buffer being full (Options.MaxEvents), since the
// last AckEvents.
func (d *Device) Events(after uint64) (evs []Event, dropped uint64, err error) {
	err = d.view(func(tx *bolt.Tx) error {
		evs, err = eventsAfter(tx, after)
		dropped = counter(tx.Bucket(bMeta), keyEventsDropped)
		return err
	})
	return evs, dropped, err
}

func eventsAfter(tx *bolt.Tx, after uint64) ([]Event, error) {
	var evs []Event
	c := tx.Bucket(bEvents).Cursor()
	for k, v := c.Seek(u64(after + 1)); k != nil; k, v = c.Next() {
		var ev Event
		if len(k) != 8 || json.Unmarshal(v, &ev) != nil {
			return nil, errRecord
		}
		ev.Seq = binary.BigEndian.Uint64(k)
		evs = append(evs, ev)
	}
	return evs, nil
}

// AckEvents removes the buffered events up to seq through, included, and
// resets the dropped count: the reader has them.
func (d *Device) AckEvents(through uint64) error {
	return d.update(func(tx *bolt.Tx) error {
		b, meta := tx.Bucket(bEvents), tx.Bucket(bMeta)
		c := b.Cursor()
		n := counter(meta, keyEventsCount)
		for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= through; k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
			n = max(n, 1) - 1
		}
		if err := meta.Put(keyEventsCount, u64(n)); err != nil {
			return err
		}
		return meta.Delete(keyEventsDropped)
	})
}

// unshownEvents returns the events raised since the last one a listener
// was shown (markShown), oldest first.
func (d *Device) unshownEvents() (evs []Event, err error) {
	err = d.view(func(tx *bolt.Tx) error {
		evs, err = eventsAfter(tx, counter(tx.Bucket(bMeta), keyEventsShown))
		return err
	})
	return evs, err
}

// markShown records that a listener was shown the events up to seq.
func (d *Device) markShown(seq uint64) error {
	return d.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bMeta)
		if seq <= counter(meta, keyEventsShown) {
			return nil
		}
		return meta.Put(keyEventsShown, u64(seq))
	})
}

// TakeEvents returns the buffered events, oldest first, and removes them
// (Events then AckEvents, in one transaction); dropped is how many were
// deleted unread because the buffer was full since the last call.
func (d *Device) TakeEvents() (evs []Event, dropped uint64, err error) {
	err = d.update(func(tx *bolt.Tx) error {
		evs, dropped = nil, 0
		b := tx.Bucket(bEvents)
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.First() {
			var ev Event
			if err := json.Unmarshal(v, &ev); err != nil {
				return err
			}
			ev.Seq = binary.BigEndian.Uint64(k)
			evs = append(evs, ev)
			if err := c.Delete(); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bMeta)
		dropped = counter(meta, keyEventsDropped)
		if err := meta.Delete(keyEventsCount); err != nil {
			return err
		}
		return meta.Delete(keyEventsDropped)
	})
	return evs, dropped, err
}

// FollowEvents calls show with each batch of events raised after seq
// after, oldest first, as they are raised by any process of the device
// (it watches SignalFile), until ctx ends (nil) or show or the store
// fails. It neither consumes them nor moves a listener's place.
func (d *Device) FollowEvents(ctx context.Context, after uint64, show func([]Event) error) error {
	watch, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { d.watchSignal(watch) })
	for {
		changed := d.changes.wait()
		evs, _, err := d.Events(after)
		if err == nil && len(evs) > 0 {
			after = evs[len(evs)-1].Seq
			err = show(evs)
		}
		if err != nil && !errors.Is(err, ErrLocked) {
			return err
		}
		wait := DefaultPoll
		if err != nil { // another process held device.db for long: look again soon
			wait = ReceiveRetryMin
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-changed:
		case <-t.C:
		case <-d.done:
			t.Stop()
			return ErrClosed
		}
		t.Stop()
	}
}
