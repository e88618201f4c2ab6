//go:build race

package sendq

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// counts of allocations that the segment pool saves do not hold.
const raceEnabled = true
