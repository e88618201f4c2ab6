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
