package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/internal/testbroker"
)

// TestConnectRetriesARefusalThatPasses: a broker at capacity refuses a
// newcomer; Connect tries again, as between reconnect passes, and gets in
// once a place is free, within its context's deadline. With
// NoRefusedRetry it returns the first refusal.
func TestConnectRetriesARefusalThatPasses(t *testing.T) {
	e := testbroker.Start(t, "tcp", broker.Options{MaxConnections: 1})
	first := connect(t, e, "first")
	if _, err := dialClient(e, "second", func(o *client.Options) { o.RefusedRetry = client.NoRefusedRetry }); !errors.Is(err, client.ErrRefused) || !strings.Contains(err.Error(), "limit of 1 connections") {
		t.Fatalf("with NoRefusedRetry: %v", err)
	}
	refused := e.Broker.Stats().OverCapacity
	got := make(chan error, 1)
	go func() { // owned by the test: ends within dialClient's 5 s
		c, err := dialClient(e, "second")
		if err == nil {
			c.Close()
		}
		got <- err
	}()
	testbroker.Eventually(t, 5*time.Second, "the second connection refused again", func() bool {
		return e.Broker.Stats().OverCapacity > refused
	})
	first.Close()
	if err := <-got; err != nil {
		t.Fatalf("once a place was free: %v", err)
	}
}

// TestConnectGivesUpOnARefusalAtItsDeadline: a refusal that does not pass
// is returned once the retries would run past the context's deadline.
func TestConnectGivesUpOnARefusalAtItsDeadline(t *testing.T) {
	e := testbroker.Start(t, "tcp", broker.Options{MaxConnections: 1})
	connect(t, e, "first")
	_, err := dialClient(e, "second", func(o *client.Options) { o.RefusedRetry = 2 * time.Second })
	if !errors.Is(err, client.ErrRefused) {
		t.Fatalf("past RefusedRetry: %v", err)
	}
	if n := e.Broker.Stats().OverCapacity; n < 2 {
		t.Fatalf("refused %d times: Connect did not try again", n)
	}
}
