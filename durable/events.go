package durable

import (
	"encoding/binary"
	"encoding/json"
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
)

// counter reads a count kept in the meta bucket.
func counter(meta *bolt.Bucket, key []byte) uint64 {
	if v := meta.Get(key); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// raise buffers ev in device.db within tx. Past Options.MaxEvents the
// oldest buffered event is deleted and counted (TakeEvents returns the
// count): a device nobody listens to does not grow without bound.
func (d *Device) raise(tx *bolt.Tx, ev Event) error {
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
		if err := meta.Put(keyEventsDropped, u64(counter(meta, keyEventsDropped)+1)); err != nil {
			return err
		}
	}
	return meta.Put(keyEventsCount, u64(n))
}

// TakeEvents returns the buffered events, oldest first, and removes them;
// dropped is how many were deleted unread because the buffer was full
// since the last call.
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
