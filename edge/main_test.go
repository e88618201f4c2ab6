package edge

import (
	"testing"

	"busbar/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
