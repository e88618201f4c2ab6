package client_test

// The test binary fails if a test leaves a goroutine behind; the helpers
// here connect real clients to a real broker (internal/testbroker).

import (
	"testing"

	"busbar/internal/leakcheck"
	"busbar/internal/testbroker"
	"busbar/internal/testbus"
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

// eachPlacement runs body with its nodes on one broker over every
// transport, then spread over a bus of three brokers (internal/testbus):
// the client's contract tests in one matrix.
func eachPlacement(t *testing.T, body func(t *testing.T, p testbus.Placement)) {
	testbus.EachTransportAndTopology(t, testOpts(), body)
}

// eachTransport runs body against a fresh broker on every transport.
func eachTransport(t *testing.T, body func(t *testing.T, e *testbroker.Env)) {
	for _, scheme := range testbroker.Transports {
		t.Run(scheme, func(t *testing.T) {
			body(t, testbroker.Start(t, scheme, testOpts()))
		})
	}
}
