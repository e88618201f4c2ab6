package client_test

import (
	"errors"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
	"busbar/seal"
	"busbar/wire"
)

// sealedBlobs seals n two-byte bodies (i, little-endian) from one new
// device to another.
func sealedBlobs(t *testing.T, n int) (from, to *seal.Identity, blobs [][]byte) {
	t.Helper()
	from, err := seal.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if to, err = seal.Generate(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		msg, err := seal.NewMessage(seal.KindSync, "g", []byte{byte(i), byte(i >> 8)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		blob, err := seal.Seal(from, to.Public(), msg)
		if err != nil {
			t.Fatal(err)
		}
		blobs = append(blobs, blob)
	}
	return from, to, blobs
}

// A pipe holds DurablePipeWindow pushes without answers and refuses one
// more; its answers come in the order sent, with increasing sequences, and
// the blobs reach the inbox in that order. AckAll deletes a set with a gap
// at every other blob in one ack, and a set given out of order with a
// duplicate.
func TestDurablePipeWindowOrderAndAckAll(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir()})
	_, bob, blobs := sealedBlobs(t, client.DurablePipeWindow+1)
	sender := connect(t, e, "alice")
	p := sender.DurablePipe()
	for i, b := range blobs[:client.DurablePipeWindow] {
		if err := p.Send(ctxT(t, 5*time.Second), b); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	if err := p.Send(ctxT(t, 5*time.Second), blobs[client.DurablePipeWindow]); !errors.Is(err, client.ErrDurablePipeFull) {
		t.Fatalf("push past the window: %v, want ErrDurablePipeFull", err)
	}
	var seqs []uint64
	for p.Len() > 0 {
		seq, err := p.Next(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if len(seqs) > 0 && seq <= seqs[len(seqs)-1] {
			t.Fatalf("answer %d: seq %d after %d", len(seqs), seq, seqs[len(seqs)-1])
		}
		seqs = append(seqs, seq)
	}
	// Once drained, the pipe takes the last one.
	last := sender.DurablePushAll(ctxT(t, 5*time.Second), blobs[client.DurablePipeWindow:])
	if last[0].Err != nil {
		t.Fatal(last[0].Err)
	}
	seqs = append(seqs, last[0].Seq)

	rx := connect(t, e, "bob")
	sess, err := rx.DurableReceive(ctxT(t, 5*time.Second), bob)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var odd []uint64 // every other blob: as many ranges as blobs
	first := min(len(seqs), wire.DurableWindow)
	for i := range first {
		b, err := sess.Next(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if b.Seq != seqs[i] {
			t.Fatalf("delivery %d: seq %d, want %d", i, b.Seq, seqs[i])
		}
		if i%2 == 1 {
			odd = append(odd, b.Seq)
		}
	}
	if err := sess.AckAll(ctxT(t, 5*time.Second), odd); err != nil {
		t.Fatal(err)
	}
	if in, _ := rx.DurableInbox(ctxT(t, 5*time.Second), bob); in.Blobs != len(seqs)-len(odd) {
		t.Fatalf("after acking %d: %d blobs left, want %d", len(odd), in.Blobs, len(seqs)-len(odd))
	}
	var rest []uint64
	for i, s := range seqs[:first] {
		if i%2 == 0 {
			rest = append(rest, s)
		}
	}
	for len(rest) < len(seqs)-len(odd) { // past the window: it reopened
		b, err := sess.Next(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, b.Seq)
	}
	if err := sess.AckAll(ctxT(t, 5*time.Second), append(rest, rest[0])); err != nil {
		t.Fatal(err)
	}
	if in, _ := rx.DurableInbox(ctxT(t, 5*time.Second), bob); in.Blobs != 0 {
		t.Fatalf("after AckAll of everything: %d blobs left", in.Blobs)
	}
}

// AckAllNoWait deletes what it names without a round trip.
func TestDurableAckAllNoWait(t *testing.T) {
	e := testbroker.Start(t, "unix", broker.Options{RelayDir: t.TempDir()})
	_, bob, blobs := sealedBlobs(t, 10)
	sender := connect(t, e, "alice")
	for _, p := range sender.DurablePushAll(ctxT(t, 5*time.Second), blobs) {
		if p.Err != nil {
			t.Fatal(p.Err)
		}
	}
	rx := connect(t, e, "bob")
	sess, err := rx.DurableReceive(ctxT(t, 5*time.Second), bob)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var seqs []uint64
	for range blobs {
		b, err := sess.Next(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, b.Seq)
	}
	if err := sess.AckAllNoWait(seqs[:7]); err != nil {
		t.Fatal(err)
	}
	testbroker.Eventually(t, 5*time.Second, "the acks to delete 7 blobs", func() bool {
		in, err := rx.DurableInbox(ctxT(t, 5*time.Second), bob)
		return err == nil && in.Blobs == 3
	})
}
