package broker_test

// Stream messages the broker refuses: dropped, counted and logged.
// slowconsumer_test.go checks drops for a subscriber that stopped reading.

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// keepHandler retains every record (a buffering or asynchronous handler
// does the same; slog documents Record.Clone for exactly that).
type keepHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *keepHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *keepHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *keepHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *keepHandler) WithGroup(string) slog.Handler      { return h }

// droppedChannels returns the "channel" attribute of every "stream message
// dropped" record kept so far.
func (h *keepHandler) droppedChannels() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Message != "stream message dropped" {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "channel" {
				out = append(out, a.Value.String())
			}
			return true
		})
	}
	return out
}

// TestStreamDropLogKeepsChannel: a refused stream message's channel is
// logged as a copy, so a handler that keeps records (slog's Record.Clone
// exists for that) sees it unchanged after the next frame is read.
// (The logged string used to alias the reader's buffer, and changed when
// the next frame was read into the same bytes.)
func TestStreamDropLogKeepsChannel(t *testing.T) {
	h := &keepHandler{}
	e := testbroker.Start(t, "unix", broker.Options{Logger: slog.New(h)})
	r := e.DialRaw(t)
	if w := r.Hello(t, wire.ProtocolVersion, "prod", "local", e.Secrets["local"]); wire.ResponseRC(w).IsError() {
		t.Fatalf("hello: %q", w)
	}
	stream := func(channel string) *wire.Message { // refused: the ttl is not a number
		return wire.New(wire.TypeStream, channel).WithHeader(wire.HeaderID, "id-1").WithHeader(wire.HeaderTTL, "abc")
	}
	r.Send(t, stream("chan.aaaa"))
	testbroker.Eventually(t, 5*time.Second, "first drop logged", func() bool { return len(h.droppedChannels()) >= 1 })
	r.Send(t, stream("chan.zzzz")) // same length and layout: read into the same bytes
	testbroker.Eventually(t, 5*time.Second, "second drop logged", func() bool { return len(h.droppedChannels()) >= 2 })
	if got := h.droppedChannels()[0]; got != "chan.aaaa" {
		t.Fatalf("the first record's channel changed after it was logged: %q, want %q", got, "chan.aaaa")
	}
}
