package cli

import (
	"strings"
	"testing"
)

func TestNATSBeyondLoopbackWithoutCredentialsOrTLSIsWarnedOf(t *testing.T) {
	for _, tc := range []struct {
		urls      []string
		creds, ca string
		warn      string // "" for none
	}{
		{[]string{"nats://127.0.0.1:4222"}, "", "", ""},
		{[]string{"nats://localhost:4222", "[::1]:4222", "127.9.9.9:4222"}, "", "", ""},
		{[]string{"nats://m1:4222"}, "", "", "m1 is not on loopback and this broker uses no NATS credentials (--nats-creds) and no TLS (--nats-tls-ca)"},
		{[]string{"nats://127.0.0.1:4222", "nats://10.0.0.2:4222"}, "b1.creds", "", "10.0.0.2 is not on loopback and this broker uses no TLS (--nats-tls-ca)"},
		{[]string{"nats://m1:4222"}, "", "ca.pem", "uses no NATS credentials (--nats-creds):"},
		{[]string{"nats://m1:4222", "nats://m2:4222"}, "b1.creds", "ca.pem", ""},
		{[]string{"tls://b1:secret@m1:4222"}, "", "ca.pem", ""}, // credentials in the URL
	} {
		got := natsExposure(tc.urls, tc.creds, tc.ca)
		if tc.warn == "" && got != "" || tc.warn != "" && !strings.Contains(got, tc.warn) {
			t.Errorf("%v creds %q ca %q: %q, want %q", tc.urls, tc.creds, tc.ca, got, tc.warn)
		}
	}
}
