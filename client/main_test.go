package client_test

// The test binary fails if a test leaves a goroutine behind; the helpers
// here connect real clients to a real broker (internal/testbroker).

import (
	"testing"

	"busbar/internal/leakcheck"
	"busbar/internal/testbroker"
	"busbar/internal/testclient"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// The shared helpers of the tests that drive a broker with real clients.
var (
	connect         = testclient.Connect
	dialClient      = testclient.DialClient
	connectPausable = testclient.ConnectPausable
	ctxT            = testclient.Ctx
)

// eachTransport runs body against a fresh broker on every transport.
func eachTransport(t *testing.T, body func(t *testing.T, e *testbroker.Env)) {
	for _, scheme := range testbroker.Transports {
		t.Run(scheme, func(t *testing.T) {
			body(t, testbroker.Start(t, scheme, testOpts()))
		})
	}
}
