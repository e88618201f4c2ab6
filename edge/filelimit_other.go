//go:build !unix

package edge

// FileLimit reports no limit: this system bounds a process's handles in
// other ways.
func FileLimit() (limit uint64, ok bool) { return 0, false }
