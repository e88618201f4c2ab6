// Package leakcheck fails a test binary that leaves goroutines behind. Call
// Main from TestMain:
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// settle is how long goroutines get to finish after the tests ran.
const settle = 5 * time.Second

// Main runs the tests, then waits up to settle for every goroutine started
// during the run to end, and exits non-zero with their stacks if any remain.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main returning the exit code, for a TestMain with cleanup to do.
func Run(m *testing.M) int {
	before := goroutines()
	code := m.Run()
	deadline := time.Now().Add(settle)
	for {
		leaked := leakedSince(before)
		if len(leaked) == 0 {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "FAIL: %d goroutines leaked:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return code
}

// goroutines maps the header line ("goroutine 7") of every goroutine other
// than the caller to its stack.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := map[string]string{}
	for i, s := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // the caller
			continue
		}
		id, _, _ := strings.Cut(s, " [")
		all[id] = s
	}
	return all
}

// leakedSince returns the stacks of goroutines started after before was
// taken, other than process-lifetime helpers the runtime or testing start
// on demand (signal handling, used by fuzzing and -timeout).
func leakedSince(before map[string]string) []string {
	var leaked []string
	for id, s := range goroutines() {
		if _, old := before[id]; old || strings.Contains(s, "os/signal.loop") {
			continue
		}
		leaked = append(leaked, s)
	}
	return leaked
}
