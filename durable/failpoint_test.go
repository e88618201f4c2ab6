package durable

import (
	"testing"
)

func TestFailpointFromEnv(t *testing.T) {
	t.Setenv(EnvFailpoint, "")
	if o, err := FailpointFromEnv(Options{}); err != nil || o.failpoint != nil {
		t.Fatalf("unset: armed %v, %v", o.failpoint != nil, err)
	}
	t.Setenv(EnvFailpoint, "sender-after-lunch")
	if _, err := FailpointFromEnv(Options{}); err == nil {
		t.Fatal("an unknown crash point was accepted")
	}
	t.Setenv(EnvFailpoint, FailRecipientBeforeAck)
	o, err := FailpointFromEnv(Options{})
	if err != nil || o.failpoint == nil {
		t.Fatalf("armed %v, %v", o.failpoint != nil, err)
	}
	// Another point passes; the armed one exits the process (tested with
	// real processes in internal/cli).
	if err := o.failpoint(FailSenderAfterPush); err != nil {
		t.Fatal(err)
	}
}
