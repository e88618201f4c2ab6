package broker

// Frames at the edges of what the broker routes: messages and replies that
// fit the frame limit as sent but not once stamped, forged results near
// that limit, malformed frames and the lease, and what a refusal's log
// line names.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"busbar/wire"
)

// writeText writes one length-prefixed frame with the given text form.
func (n *rawNode) writeText(t *testing.T, text []byte) {
	t.Helper()
	buf := make([]byte, 4+len(text))
	binary.BigEndian.PutUint32(buf, uint32(len(text)))
	copy(buf[4:], text)
	if _, err := n.nc.Write(buf); err != nil {
		t.Fatal(err)
	}
}

// next returns the next message n reads that want accepts.
func (n *rawNode) next(t *testing.T, what string, want func(*wire.Message) bool) *wire.Message {
	t.Helper()
	_ = n.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		m, err := n.r.ReadMessage()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !m.IsHeartbeat() && want(m) {
			return m
		}
	}
}

func replyTo(id string) func(*wire.Message) bool {
	return func(m *wire.Message) bool { return m.Value(wire.HeaderReplyTo) == id }
}

// drain reads and discards whatever n is sent until it closes.
func (n *rawNode) drain() {
	go func() {
		for {
			if _, err := n.r.ReadFrame(); err != nil {
				return
			}
		}
	}()
}

// padded is a frame text of exactly size bytes: head, an x-pad header
// filling the gap, and a body of bodyLen bytes.
func padded(head string, bodyLen, size int) []byte {
	const tail = "\n---\n"
	pad := size - len(head) - len("x-pad: ") - len(tail) - bodyLen
	return []byte(head + "x-pad: " + strings.Repeat("p", pad) + tail + strings.Repeat("b", bodyLen))
}

// bigBroker is a broker whose payload limit is as high as it goes, with
// node a asking and h handling and subscribing to "ch".
func bigBroker(t *testing.T) (b *Broker, a, h *rawNode, maxPayload int) {
	t.Helper()
	maxPayload = wire.MaxMessageBytes - MaxFrameOverhead
	b, secret := newTestBroker(t, Options{MaxPayload: maxPayload, MaxQueueBytes: 4 * wire.MaxMessageBytes})
	a, h = join(t, b, secret, "a"), join(t, b, secret, "h")
	t.Cleanup(func() {
		_ = a.nc.Close()
		_ = h.nc.Close()
		_ = b.Shutdown(context.Background())
	})
	for _, cmd := range []string{wire.CmdHandle, wire.CmdSubscribe} {
		h.send(t, wire.New(wire.TypeRequest, cmd).WithHeader(wire.HeaderID, cmd).WithBody([]byte("ch")))
		if m := h.next(t, cmd, replyTo(cmd)); m.Value(wire.HeaderRC) != "0" {
			t.Fatalf("%s: %v", cmd, m)
		}
	}
	return b, a, h, maxPayload
}

// A handler cannot pass its failure off as the bus's even when correcting
// its result would take the reply past the frame limit: the call fails
// closed, HANDLER_FAILED. (The corrected reply used to be dropped for the
// forged one, which was forwarded as it was.)
func TestForgedResultNearTheFrameLimitFailsClosed(t *testing.T) {
	_, a, h, maxPayload := bigBroker(t)
	a.send(t, wire.New(wire.TypeRequest, "ch").WithHeader(wire.HeaderID, "r1").WithHeader(wire.HeaderTo, "h"))
	h.next(t, "request", func(m *wire.Message) bool { return m.Value(wire.HeaderID) == "r1" })
	head := "---\ncommand: ch\nfrom: " + strings.Repeat("f", 300) + "\nrc: 20\nreply-to: r1\nresult: DISCONNECT\ntype: response\n"
	h.writeText(t, padded(head, maxPayload, wire.MaxMessageBytes-2))
	got := a.next(t, "answer", replyTo("r1"))
	if r := got.Value(wire.HeaderResult); r != string(wire.ResultHandler) {
		t.Fatalf("the handler's forged result %q reached the requester; want %s", r, wire.ResultHandler)
	}
}

// A request or send that fits the frame limit as sent but not once the
// broker stamps its source and deadline is refused REJECTED (a permanent
// refusal: retrying cannot help), not OVERLOAD or BACKPRESSURED.
func TestMessageTooLargeOnceStampedIsRejected(t *testing.T) {
	b, a, h, maxPayload := bigBroker(t)
	h.drain()
	a.writeText(t, padded("---\ncommand: ch\nid: big1\nto: h\ntype: request\n", maxPayload, wire.MaxMessageBytes))
	req := a.next(t, "request answer", replyTo("big1"))
	a.writeText(t, padded("---\ncommand: ch\nid: big2\nto: h\ntype: event\n", maxPayload, wire.MaxMessageBytes))
	rcpt := a.next(t, "receipt", replyTo("big2"))
	if req.Value(wire.HeaderResult) != string(wire.ResultRejected) || rcpt.Value(wire.HeaderResult) != string(wire.Rejected) {
		t.Fatalf("request answered %q, send %q; want REJECTED both", req.Value(wire.HeaderResult), rcpt.Value(wire.HeaderResult))
	}
	if n := b.Stats().Refused; n != 2 {
		t.Fatalf("Refused %d, want 2", n)
	}
}

// A node that sends nothing but malformed frames loses its lease: only a
// frame that parses shows it is alive. (Any frame used to keep it.)
func TestMalformedFramesDoNotKeepALease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, secret := newTestBroker(t, Options{HeartbeatInterval: 100 * time.Millisecond, LeaseTimeout: 300 * time.Millisecond})
		n := join(t, b, secret, "m")
		t.Cleanup(func() {
			_ = n.nc.Close()
			_ = b.Shutdown(context.Background())
		})
		n.drain()
		for range 30 {
			if _, err := n.nc.Write(append([]byte{0, 0, 0, 12}, "---\nbad\n---\n"...)); err != nil {
				break // the broker dropped it
			}
			time.Sleep(50 * time.Millisecond) // virtual time: the lease is the subject
		}
		synctest.Wait()
		if registered(b, "m") {
			t.Fatalf("a node sending only malformed frames kept its lease (%d malformed)", b.Stats().Malformed)
		}
	})
}

// A refusal's log line names what was refused: the channel of a refused
// subscription; a frame too short to parse is logged too. A refused
// announcement from a second node of the same address within the second
// is counted, not written: the refusal log writes one line a second per
// reason and address (edge.RefusalLog).
func TestRefusalLogNamesWhatWasRefused(t *testing.T) {
	var mu sync.Mutex
	var logged bytes.Buffer
	b, secret := newTestBroker(t, Options{MaxRegistrations: 1, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))})
	a := join(t, b, secret, "a")
	a2 := join(t, b, secret, "a2")
	t.Cleanup(func() {
		_ = a.nc.Close()
		_ = a2.nc.Close()
		_ = b.Shutdown(context.Background())
	})
	a.send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "s1").WithBody([]byte("one")))
	a.next(t, "s1", replyTo("s1"))
	a.send(t, wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "s2").WithBody([]byte("two")))
	a.next(t, "s2", replyTo("s2"))
	ann, _ := json.Marshal(wire.Announcement{Service: "svc", Version: "1", Channels: []string{"a", "b"}})
	a2.send(t, wire.New(wire.TypeRequest, wire.CmdAnnounce).WithHeader(wire.HeaderID, "s3").WithBody(ann))
	a2.next(t, "s3", replyTo("s3"))
	a.writeText(t, []byte("abc")) // shorter than any frame
	a.next(t, "bus.error", func(m *wire.Message) bool { return m.Value(wire.HeaderCommand) == wire.CmdError })
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"op=bus.sub channel=two", "malformed frame"} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("%q is not in the log:\n%s", want, logged.String())
		}
	}
	// Written only when a second had passed since the first (a slow
	// machine); counted otherwise.
	_, notLogged := b.Refusals().Counts()
	if announced := strings.Contains(logged.String(), "op=bus.announce channel=svc"); announced == (notLogged == 1) {
		t.Errorf("the announcement's refusal: written %v, counted and not written %d; want one of the two:\n%s", announced, notLogged, logged.String())
	}
}
