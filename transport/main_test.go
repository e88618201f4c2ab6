package transport

import (
	"testing"

	"busbar/internal/leakcheck"
)

// TestMain fails the run if any test leaves a goroutine behind: a leaked
// accept loop, dial or handshake here would leak in the broker too.
func TestMain(m *testing.M) { leakcheck.Main(m) }
