package broker

import (
	"testing"

	"busbar/auth"
)

// TestAllowsRemembersOnlyGrants checks the per-action cache of conn.allows:
// a remembered grant never leaks to another channel or another action, and
// a refusal is never remembered.
func TestAllowsRemembersOnlyGrants(t *testing.T) {
	c := &conn{perms: &auth.Permissions{
		Publish:   []auth.Pattern{"orders.>"},
		Subscribe: []auth.Pattern{"news.*"},
	}}
	steps := []struct {
		a       auth.Action
		channel string
		want    bool
	}{
		{auth.ActionPublish, "orders.created", true},
		{auth.ActionPublish, "orders.created", true}, // from the cache
		{auth.ActionPublish, "billing.paid", false},  // a different channel after a grant
		{auth.ActionSubscribe, "orders.created", false},
		{auth.ActionSend, "orders.created", false},
		{auth.ActionSubscribe, "news.today", true},
		{auth.ActionPublish, "news.today", false},
		{auth.ActionPublish, "orders.created", true},
		{auth.Action("bogus"), "orders.created", false},
		{auth.ActionPublish, "orders.created.", false}, // invalid syntax, close to the cached one
	}
	for i, s := range steps {
		if got := c.allows(s.a, s.channel); got != s.want {
			t.Fatalf("step %d: allows(%s, %q) = %v, want %v", i, s.a, s.channel, got, s.want)
		}
	}
	if (&conn{}).allows(auth.ActionHandle, "anything") != true {
		t.Fatal("a connection without permissions (in-process) is allowed everything")
	}
}
