//go:build !race

package sendq

const raceEnabled = false
