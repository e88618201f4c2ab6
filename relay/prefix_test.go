package relay

import (
	"context"
	"testing"
)

func TestPrefixCountsOnlyTheInboxesUnderIt(t *testing.T) {
	s := open(t, "", Options{})
	ctx := context.Background()
	for _, dev := range []string{"trueseal.a", "trueseal.b", "trueseal.b", "other"} {
		if _, err := s.Push(ctx, dev, []byte("xyz")); err != nil {
			t.Fatal(err)
		}
	}
	n, in := s.Prefix("trueseal.")
	if n != 2 || in.Blobs != 3 || in.Bytes != 9 || in.Pending != 0 {
		t.Fatalf("trueseal.: %d inboxes, %+v", n, in)
	}
	if n, in := s.Prefix("none."); n != 0 || in.Blobs != 0 {
		t.Fatalf("none.: %d inboxes, %+v", n, in)
	}
	if err := s.Ack("trueseal.a", 1); err != nil {
		t.Fatal(err)
	}
	if n, in := s.Prefix("trueseal."); n != 1 || in.Blobs != 2 {
		t.Fatalf("after an ack: %d inboxes, %+v", n, in)
	}
}
