package durable

import (
	"testing"

	"busbar/internal/leakcheck"
)

// The test binary fails if a test leaves a goroutine behind.
func TestMain(m *testing.M) { leakcheck.Main(m) }
