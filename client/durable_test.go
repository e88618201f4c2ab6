package client_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
	"busbar/relay"
	"busbar/seal"
	"busbar/wire"
)

// A device pushes sealed blobs through its client and another receives
// them through its own, in order, opens them, and acks them; the relay
// sends at most wire.DurableWindow unacked, and the next once one is
// acked.
func TestDurablePushReceiveAckThroughClients(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir(), Relay: relay.Options{MaxPushRate: -1}}) // more pushes than the default burst
	const n = wire.DurableWindow + 1
	alice, bob, blobs := sealedBlobs(t, n)
	sender := connect(t, e, "alice")
	for i, blob := range blobs {
		if seq, err := sender.DurablePush(ctxT(t, 5*time.Second), blob); err != nil || seq != uint64(i+1) {
			t.Fatalf("push %d: seq %d, %v", i, seq, err)
		}
	}
	if _, err := sender.DurablePush(ctxT(t, 5*time.Second), []byte("junk")); !client.DurablePermanent(err) {
		t.Fatalf("a junk push: %v, want a permanent refusal", err)
	}

	rx := connect(t, e, "bob")
	if in, err := rx.DurableInbox(ctxT(t, 5*time.Second), bob); err != nil || in.Blobs != n || in.Bytes == 0 {
		t.Fatalf("bob's inbox before receiving: %+v %v, want %d blobs", in, err, n)
	}
	if in, err := rx.DurableInbox(ctxT(t, 5*time.Second), alice); err != nil || in.Blobs != 0 {
		t.Fatalf("alice's inbox: %+v %v, want empty", in, err)
	}
	sess, err := rx.DurableReceive(ctxT(t, 5*time.Second), bob)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	senders := seal.SendersFunc(func(string, seal.DeviceID) (seal.Public, bool) { return alice.Public(), true })
	for i := range wire.DurableWindow {
		b, err := sess.Next(ctxT(t, 5*time.Second))
		if err != nil || b.Seq != uint64(i+1) {
			t.Fatalf("delivery %d: %+v %v", i, b.Seq, err)
		}
		in, err := seal.Open(bob, b.Blob, senders)
		if err != nil || int(in.Body[0])|int(in.Body[1])<<8 != i {
			t.Fatalf("delivery %d opens to %v, %v", i, in.Body, err)
		}
	}
	// The window is full: the last blob comes only after an ack. (Waiting
	// 300 ms for it can only pass wrongly, never fail wrongly.)
	if b, err := sess.Next(ctxT(t, 300*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blob %d delivered past a full window (%v)", b.Seq, err)
	}
	if err := sess.Ack(ctxT(t, 5*time.Second), 1); err != nil {
		t.Fatal(err)
	}
	if b, err := sess.Next(ctxT(t, 5*time.Second)); err != nil || b.Seq != n {
		t.Fatalf("after an ack: %+v %v, want seq %d", b.Seq, err, n)
	}
	// A new session on the same client ends this one, and starts again
	// from the oldest blob not acked.
	again, err := rx.DurableReceive(ctxT(t, 5*time.Second), bob)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, err := sess.Next(context.Background()); !errors.Is(err, client.ErrDurableSession) {
		t.Fatalf("Next on the replaced session: %v", err)
	}
	if b, err := again.Next(ctxT(t, 5*time.Second)); err != nil || b.Seq != 2 {
		t.Fatalf("the new session starts with %d, %v; want seq 2", b.Seq, err)
	}
	again.Close()
	if _, err := again.Next(context.Background()); !errors.Is(err, client.ErrDurableSession) {
		t.Fatalf("Next after Close: %v", err)
	}
}

// A client that reconnected proves its device to the relay on the new
// connection (the proof signs that connection's nonce), so receiving and
// asking for the inbox work as before the broker restarted.
func TestDurableReceiveAfterReconnect(t *testing.T) {
	env := testbroker.Start(t, "unix", testOpts())
	r := newRestartable(t, env, "broker-a")
	at := func(o *client.Options) { o.Server = r.endpoint() }
	alice, bob, blobs := sealedBlobs(t, 1)
	ev := newConnEvents()
	rx := connect(t, env, "bob", at, reconnecting(ev))
	if _, err := rx.DurableInbox(ctxT(t, 5*time.Second), bob); err != nil {
		t.Fatalf("inbox before the restart: %v", err)
	}

	r.stop()
	ev.next(t, client.Disconnected)
	r.start()
	ev.next(t, client.Reconnected)

	sender := connect(t, env, "alice", at)
	if _, err := sender.DurablePush(ctxT(t, 5*time.Second), blobs[0]); err != nil {
		t.Fatal(err)
	}
	if in, err := rx.DurableInbox(ctxT(t, 5*time.Second), bob); err != nil || in.Blobs != 1 {
		t.Fatalf("inbox after reconnecting: %+v %v, want 1 blob", in, err)
	}
	sess, err := rx.DurableReceive(ctxT(t, 5*time.Second), bob)
	if err != nil {
		t.Fatalf("receive after reconnecting: %v", err)
	}
	defer sess.Close()
	b, err := sess.Next(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	senders := seal.SendersFunc(func(string, seal.DeviceID) (seal.Public, bool) { return alice.Public(), true })
	if _, err := seal.Open(bob, b.Blob, senders); err != nil {
		t.Fatalf("the blob received after reconnecting: %v", err)
	}
}

// A session belongs to its connection: after the connection is lost and
// the client reconnected, an ack of a blob it delivered fails with
// ErrDurableSession (it is not sent on the new connection, which has no
// session), and the blob comes again on the next session.
func TestDurableAckAfterAReconnectEndsWithTheSession(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir()})
	_, bob, blobs := sealedBlobs(t, 1)
	if _, err := connect(t, e, "alice").DurablePush(ctxT(t, 5*time.Second), blobs[0]); err != nil {
		t.Fatal(err)
	}
	rx, dr := testclient.ConnectDroppable(t, e, "bob")
	back := make(chan struct{}, 1)
	stop := rx.NotifyConn(func(ev client.ConnEvent) {
		if ev.Kind == client.Reconnected {
			back <- struct{}{}
		}
	})
	defer stop()
	sess, err := rx.DurableReceive(ctxT(t, 5*time.Second), bob)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sess.Next(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	dr.Drop()
	select {
	case <-back:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnect")
	}
	if err := rx.WaitConnected(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := sess.Ack(ctxT(t, 5*time.Second), b.Seq); !errors.Is(err, client.ErrDurableSession) {
		t.Fatalf("ack after the reconnect: %v, want ErrDurableSession", err)
	}
	again, err := rx.DurableReceive(ctxT(t, 5*time.Second), bob)
	if err != nil {
		t.Fatal(err)
	}
	if b2, err := again.Next(ctxT(t, 5*time.Second)); err != nil || b2.Seq != b.Seq {
		t.Fatalf("the next session: %+v %v, want seq %d again", b2, err, b.Seq)
	}
}

// A broker that speaks only newer protocol versions: Connect fails with a
// *VersionError carrying the versions it speaks, which is ErrIncompatible.
func TestConnectToAnotherVersionSaysWhichVersionsTheBrokerSpeaks(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "other.sock")
	testbroker.ServeOtherVersion(t, sock, 2, 3)
	_, err := client.Connect(ctxT(t, 5*time.Second), client.Options{Node: "old", Server: "unix://" + sock})
	var ve *client.VersionError
	if !errors.As(err, &ve) || ve.Min != 2 || ve.Max != 3 || ve.Have != wire.ProtocolVersion || !errors.Is(err, client.ErrIncompatible) {
		t.Fatalf("Connect: %v, want a VersionError for 2 to 3", err)
	}
}
