package broker

import (
	"testing"
	"time"
)

// A publication is answered a tenth of its budget before its deadline, and
// never more than MaxPublishAnswerLead before it.
func TestPublishAnswerLeadAtAndPastItsCap(t *testing.T) {
	now := time.Unix(1000, 0)
	capAt := 10 * MaxPublishAnswerLead // the budget whose tenth is the cap
	for _, c := range []struct {
		budget, lead time.Duration
	}{
		{0, 0},
		{500 * time.Millisecond, 50 * time.Millisecond},
		{capAt - 10*time.Millisecond, MaxPublishAnswerLead - time.Millisecond},
		{capAt, MaxPublishAnswerLead},
		{capAt + 10*time.Millisecond, MaxPublishAnswerLead},
		{30 * time.Second, MaxPublishAnswerLead},
	} {
		deadline := now.Add(c.budget)
		if got := deadline.Sub(publishAnswerAt(now, deadline)); got != c.lead {
			t.Errorf("budget %v: answered %v before the deadline, want %v", c.budget, got, c.lead)
		}
	}
}

// The broker's answers may exceed MaxPayload up to what the asker's queue
// holds with room for a header block, never past the frame limit and
// never below MaxPayload.
func TestAnswerLimitAtItsEdges(t *testing.T) {
	for _, c := range []struct {
		payload, queue, want int
	}{
		{200, MaxFrameOverhead + 2048, 2048},
		{4096, MaxFrameOverhead + 2048, 4096}, // never below MaxPayload
		{4096, MaxFrameOverhead + 4096, 4096}, // at MaxPayload
		{4096, MaxFrameOverhead + 4097, 4097}, // just past it
		{1 << 20, 1 << 30, maxPayloadCeiling}, // never past the frame limit
		{DefaultMaxPayload, DefaultMaxQueueBytes, DefaultMaxQueueBytes - MaxFrameOverhead},
	} {
		b := &Broker{opts: Options{MaxPayload: c.payload, MaxQueueBytes: c.queue}}
		if got := b.answerLimit(); got != c.want {
			t.Errorf("MaxPayload %d, MaxQueueBytes %d: answer limit %d, want %d", c.payload, c.queue, got, c.want)
		}
	}
}
