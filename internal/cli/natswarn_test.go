package cli

import (
	"strings"
	"testing"
)

func TestNATSBeyondLoopbackWithoutCredentialsOrTLSIsWarnedOf(t *testing.T) {
	for _, tc := range []struct {
		urls        []string
		creds, ca   string
		key, sealed bool
		warn        string // "" for none
	}{
		{[]string{"nats://127.0.0.1:4222"}, "", "", false, false, ""},
		{[]string{"nats://localhost:4222", "[::1]:4222", "127.9.9.9:4222"}, "", "", false, false, ""},
		{[]string{"nats://m1:4222"}, "", "", false, false, "m1 is not on loopback and this broker uses no NATS credentials (--nats-creds) and no TLS (--nats-tls-ca) and no bus key (--nats-bus-key): anyone who can reach NATS can read every message of the bus and forge"},
		{[]string{"nats://127.0.0.1:4222", "nats://10.0.0.2:4222"}, "b1.creds", "", false, false, "10.0.0.2 is not on loopback and this broker uses no TLS (--nats-tls-ca) and no bus key"},
		{[]string{"nats://m1:4222"}, "", "ca.pem", false, false, "uses no NATS credentials (--nats-creds) and no bus key (--nats-bus-key):"},
		// Credentials and TLS, no bus key: forging is NATS's permissions' alone.
		{[]string{"nats://m1:4222", "nats://m2:4222"}, "b1.creds", "ca.pem", false, false, "uses no bus key (--nats-bus-key): any NATS user allowed the bus's subjects can forge messages"},
		{[]string{"tls://b1:secret@m1:4222"}, "", "ca.pem", false, false, "no bus key"}, // credentials in the URL
		{[]string{"tls://b1:secret@m1:4222"}, "", "ca.pem", true, false, ""},
		{[]string{"nats://m1:4222", "nats://m2:4222"}, "b1.creds", "ca.pem", true, false, ""},
		// A bus key without credentials: nothing forged, all read, unless sealed.
		{[]string{"nats://m1:4222"}, "", "", true, false, "anyone who can reach NATS can read every message of the bus."},
		{[]string{"nats://m1:4222"}, "", "", true, true, ""},
	} {
		got := natsExposure(tc.urls, tc.creds, tc.ca, tc.key, tc.sealed)
		if tc.warn == "" && got != "" || tc.warn != "" && !strings.Contains(got, tc.warn) {
			t.Errorf("%v creds %q ca %q key %v sealed %v: %q, want %q", tc.urls, tc.creds, tc.ca, tc.key, tc.sealed, got, tc.warn)
		}
	}
}
