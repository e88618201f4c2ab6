package broker_test

// One connection cannot flood the broker's log: warnings about it are
// written at most once a second per kind, with a count of the ones
// suppressed; and a connection that sends only frames that do not parse
// is closed after MaxMalformedRun of them.

import (
	"context"
	"encoding/binary"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"busbar/broker"
	"busbar/internal/testbroker"
	"busbar/wire"
)

// logCounter counts the broker's log records by message.
type logCounter struct {
	mu    sync.Mutex
	count map[string]int
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.count[r.Message]++
	l.mu.Unlock()
	return nil
}
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }
func (l *logCounter) n(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count[msg]
}

func badFrame() []byte {
	bad := []byte("---\nbad header\n---\n")
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(bad))), bad...)
}

// sendBad sends n frames that do not parse and reads their answers.
func sendBad(t *testing.T, r *testbroker.Raw, n int) (last *wire.Message) {
	t.Helper()
	r.SendBytes(t, []byte(strings.Repeat(string(badFrame()), n)))
	for range n {
		last = r.Read(t)
		if last.Value(wire.HeaderResult) != string(wire.ResultMalformed) {
			t.Fatalf("answer %v, want MALFORMED", last)
		}
	}
	return last
}

func TestMalformedFramesAreLoggedOncePerSecondAndGarbageIsClosed(t *testing.T) {
	logs := &logCounter{count: map[string]int{}}
	e := testbroker.Start(t, "tcp", broker.Options{Logger: slog.New(logs)})
	r := e.DialRaw(t)
	r.Hello(t, wire.ProtocolVersion, "mallory", "local", e.Secrets["local"])

	// Just under the run, then a frame that parses: the run starts again,
	// and the connection stays.
	start := time.Now()
	sendBad(t, r, broker.MaxMalformedRun-1)
	r.Send(t, wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderID, "e1").WithHeader(wire.HeaderTo, "nobody"))
	if m := r.Read(t); m.Value(wire.HeaderReplyTo) != "e1" {
		t.Fatalf("a valid frame after %d bad ones: %v", broker.MaxMalformedRun-1, m)
	}
	sendBad(t, r, broker.MaxMalformedRun-1)
	sent := 2 * (broker.MaxMalformedRun - 1)
	written := logs.n("malformed frame")
	if most := 1 + int(time.Since(start)/time.Second); written > most || written < 1 {
		t.Fatalf("%d warnings written for %d malformed frames in %v, want 1 to %d", written, sent, time.Since(start), most)
	}
	if s := e.Broker.Stats(); s.LogSuppressed != int64(sent-written) || s.Malformed != int64(sent) {
		t.Fatalf("suppressed %d, malformed %d; want %d and %d", s.LogSuppressed, s.Malformed, sent-written, sent)
	}

	// Another connection from the same address shares the address's
	// allowance (edge.RefusalLog): reconnecting buys no more lines.
	other := e.DialRaw(t)
	other.Hello(t, wire.ProtocolVersion, "other", "local", e.Secrets["local"])
	sendBad(t, other, 1)
	if n, most := logs.n("malformed frame"), 1+int(time.Since(start)/time.Second); n > most {
		t.Fatalf("%d warnings written in %v from one address, want at most %d", n, time.Since(start), most)
	}

	// One more: the run reaches MaxMalformedRun, the last answer says so,
	// and the connection closes.
	if last := sendBad(t, r, 1); !strings.Contains(last.Value(wire.HeaderError), "in a row") {
		t.Fatalf("the last answer %v does not say why the connection closes", last)
	}
	if _, err := r.ReadErr(); err == nil {
		t.Fatal("a connection that sends only garbage stayed open")
	}
	if s := e.Broker.Stats(); s.GarbageClosed != 1 || logs.n("closing a connection that sends only garbage") != 1 {
		t.Fatalf("garbage closed %d, logged %d; want 1 and 1", s.GarbageClosed, logs.n("closing a connection that sends only garbage"))
	}
}

// A peer that reconnects after each burst of malformed frames gets no
// more lines in the log than one that stays: the refusal log counts per
// source address across connections, one line a second.
func TestReconnectingAfterEachBurstDoesNotFloodTheLog(t *testing.T) {
	const logins = 100
	logs := &logCounter{count: map[string]int{}}
	e := testbroker.Start(t, "tcp", broker.Options{Logger: slog.New(logs)})
	start := time.Now()
	for i := range logins {
		r := e.DialRaw(t)
		r.Hello(t, wire.ProtocolVersion, "mallory-"+strconv.Itoa(i), "local", e.Secrets["local"])
		sendBad(t, r, 3)
		r.Conn.Close()
	}
	elapsed := time.Since(start)
	if n, most := logs.n("malformed frame"), 1+int(elapsed/time.Second); n > most {
		t.Fatalf("%d warnings written for %d logins of one address in %v; want at most %d", n, logins, elapsed, most)
	}
	written, notLogged := e.Broker.Refusals().Counts()
	if written+notLogged < logins {
		t.Fatalf("the refusal log saw %d+%d warnings, want at least %d", written, notLogged, logins)
	}
}
