package bedrock

// The test binary fails if a test leaves a goroutine behind.

import (
	"testing"

	"busbar/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
