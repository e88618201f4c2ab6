package trueseal

import (
	"context"

	"busbar/broker"
	"busbar/relay"
)

// Inboxes are where a Server keeps its inboxes: a relay store of its own
// (Options.Store), or the broker's, which on a bus with relay brokers
// keeps each inbox on its home broker and reaches it from any broker
// (BusInboxes; docs/trueseal.md#on-a-bus).
type Inboxes interface {
	// Pusher starts a push session: its pushes reach their inboxes in
	// the order admitted.
	Pusher() Pusher
	// Receive opens a device's receive session.
	Receive(ctx context.Context, device string) (Receiver, error)
}

// Pusher admits a push session's pushes, as relay.Store.PushAsync: then
// gets the blob's sequence once it is on disk, or a *relay.Refusal; an
// error returned is a refusal at admission (then is not called). then
// must not block.
type Pusher interface {
	PushAsync(device string, blob []byte, then func(relay.Seq, error)) error
}

// Receiver is one receive session: the inbox in arrival order, each blob
// once; a blob not acked comes again on a new session.
type Receiver interface {
	// Next waits for the next blob. It fails when ctx ends or the
	// session ends (its inbox's home left): the device is then told by
	// the connection's close.
	Next(ctx context.Context) (relay.Blob, error)
	// Ack deletes a blob from this device's inbox only.
	Ack(seq relay.Seq) error
	Close()
}

// storeInboxes are the inboxes of a relay store of the server's own.
type storeInboxes struct{ st *relay.Store }

func (x storeInboxes) Pusher() Pusher { return x.st }

func (x storeInboxes) Receive(_ context.Context, device string) (Receiver, error) {
	sess, err := x.st.Session(device)
	if err != nil {
		return nil, err
	}
	return storeReceiver{x.st, sess, device}, nil
}

type storeReceiver struct {
	st     *relay.Store
	sess   *relay.Session
	device string
}

func (r storeReceiver) Next(ctx context.Context) (relay.Blob, error) { return r.sess.Next(ctx) }
func (r storeReceiver) Ack(seq relay.Seq) error                      { return r.st.Ack(r.device, seq) }
func (storeReceiver) Close()                                         {}

// KeyFingerprintDigits is how many hex digits of the relay's public key
// its fingerprint is.
const KeyFingerprintDigits = 16

// KeyFingerprint names the relay key whose public key is pub to the
// other brokers of a bus and in their logs: the first
// KeyFingerprintDigits hex digits of the public key, those `busbar
// trueseal key` and serve's start line begin with, so an operator sees at
// a glance which key file a broker holds. It guards against a wrong file,
// not an adversary (the bus key does that).
func KeyFingerprint(pub []byte) string {
	return PublicKeyText(pub)[:min(KeyFingerprintDigits, 2*len(pub))]
}

// JoinBus checks, on a bus with relay brokers, that every broker serving
// trueseal holds the relay key whose public key is pub: trueseal clients
// pin it, so a broker with another would serve sessions whose handshakes
// fail. It announces pub's fingerprint with broker b's share of the
// directory, and returns a *broker.EdgeKeyError naming both fingerprints
// when another broker announces another; then this server must not
// serve (the brokers already serving warn). It waits
// broker.EdgeKeyCheckHeartbeats of the bus's heartbeats; alone, or on a
// bus without relay brokers, it returns nil at once.
func JoinBus(ctx context.Context, b *broker.Broker, pub []byte) error {
	return b.JoinEdgeKey(ctx, Protocol, KeyFingerprint(pub))
}

// BusInboxes are broker b's inboxes of trueseal devices: in its relay
// store, or, on a bus with relay brokers, in each device's home broker's,
// reached through the broker's forwarding (docs/cluster.md#durable-inboxes).
func BusInboxes(b *broker.Broker) (Inboxes, error) {
	x, err := b.EdgeInboxes(Protocol)
	if err != nil {
		return nil, err
	}
	return busInboxes{x}, nil
}

type busInboxes struct{ x *broker.EdgeInboxes }

func (b busInboxes) Pusher() Pusher { return b.x.Pusher() }

func (b busInboxes) Receive(ctx context.Context, device string) (Receiver, error) {
	s, err := b.x.Receive(ctx, device)
	if err != nil {
		return nil, err
	}
	return s, nil
}
