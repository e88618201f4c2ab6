//go:build soak

package cli

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"busbar/internal/testbroker"
)

// The soak (not in CI): rounds of random sends from two devices and random
// SIGKILLs of a sender, a listener or `busbar serve`, each restarted; then
// every send whose id was printed must have been handled by the other
// device, in its sender's order once duplicates are removed.
//
//	go test -tags soak -run TestSoak -count=1 -v -timeout 30m ./internal/cli/
//
// BUSBAR_SOAK_ROUNDS sets the rounds (default 150), BUSBAR_SOAK_SEED the
// random seed (default the time).
func TestSoak(t *testing.T) {
	rounds := envInt("BUSBAR_SOAK_ROUNDS", 150)
	seed := uint64(envInt("BUSBAR_SOAK_SEED", int(time.Now().UnixNano()%1e9)))
	rnd := rand.New(rand.NewPCG(seed, seed))
	t.Logf("seed %d, %d rounds", seed, rounds)
	start := time.Now()
	s, env, laptop, phone := pairedDevices(t)
	names := map[string]string{laptop: "laptop", phone: "phone"}
	files := map[string]string{}
	listeners := map[string]*proc{}
	listen := func(dev string) *proc {
		// echo writes the line in one write: a handler killed half-way
		// leaves no partial line.
		h := "echo \"$(cat)\" >> '" + files[dev] + "'"
		return startProc(t, env, "durable", "listen", "home", "--device", dev, "--exec", h)
	}
	for _, dev := range []string{laptop, phone} {
		files[dev] = filepath.Join(t.TempDir(), names[dev]+".handled")
		listeners[dev] = listen(dev)
	}
	acked := map[string][]int{} // by sender name: the numbers whose id was printed
	next := map[string]int{}
	kills := map[string]int{}
	sends, unacked := 0, 0
	// A listener outlives every kill of serve: one that exits by itself
	// fails the soak (no supervisor restarts it).
	alive := func(when string) {
		t.Helper()
		for dev, p := range listeners {
			if p.exited() {
				t.Fatalf("%s: the %s listener exited by itself (%v):\n%s", when, names[dev], p.err, p.out)
			}
		}
	}
	for round := range rounds {
		alive(fmt.Sprintf("round %d", round))
		switch r := rnd.IntN(100); {
		case r < 60: // a send, killed one time in four
			dev := laptop
			if r%2 == 1 {
				dev = phone
			}
			name := names[dev]
			next[name]++
			n := next[name]
			sends++
			p := startProc(t, env, "durable", "send", "home", fmt.Sprintf("%s %d", name, n), "--device", dev)
			if rnd.IntN(4) == 0 {
				time.Sleep(time.Duration(rnd.IntN(40)) * time.Millisecond)
				p.kill()
				kills["send"]++
			} else {
				_ = p.wait()
			}
			if line, _, _ := strings.Cut(p.out.String(), "\n"); len(line) == 32 {
				acked[name] = append(acked[name], n)
			} else {
				unacked++
			}
		case r < 85: // a listener
			dev := laptop
			if r%2 == 1 {
				dev = phone
			}
			listeners[dev].kill()
			kills["listen "+names[dev]]++
			listeners[dev] = listen(dev)
		default: // the relay
			s.crash()
			kills["serve"]++
			s = startServe(t, s.data)
		}
		time.Sleep(time.Duration(rnd.IntN(60)) * time.Millisecond)
	}
	// Quiet: everything acknowledged arrives, both outboxes drain.
	alive("after the last round")
	var lines map[string][]string
	testbroker.AwaitEvery(t, 120*time.Second, 500*time.Millisecond, "every acknowledged send handled", func() error {
		alive("while draining")
		lines = map[string][]string{}
		for _, dev := range []string{laptop, phone} {
			b, _ := os.ReadFile(files[dev])
			lines[dev] = strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
		}
		for from, to := range map[string]string{"laptop": phone, "phone": laptop} {
			seen := map[string]bool{}
			for _, l := range lines[to] {
				seen[l] = true
			}
			for _, n := range acked[from] {
				if !seen[fmt.Sprintf("%s_%d", from, n)] {
					return fmt.Errorf("%s %d not handled yet", from, n)
				}
			}
		}
		for _, dev := range []string{laptop, phone} {
			if st := status(t, env, dev); st.Outbox != 0 {
				return fmt.Errorf("%s outbox %d", names[dev], st.Outbox)
			}
		}
		return nil
	})
	handled, dups, delivered := 0, 0, 0
	for _, dev := range []string{laptop, phone} {
		last := map[string]int{}
		seen := map[string]bool{}
		for _, l := range lines[dev] {
			handled++
			if seen[l] {
				dups++
				continue
			}
			seen[l] = true
			delivered++
			from, num, _ := strings.Cut(l, "_")
			n, _ := strconv.Atoi(num)
			if n <= last[from] {
				t.Errorf("%s handled %s after %s %d: out of order", names[dev], l, from, last[from])
			}
			last[from] = n
		}
	}
	t.Logf("rounds %d, seed %d: sends %d (ids printed %d, killed before the id %d); kills %v; handled %d (distinct %d, duplicates %d); %v",
		rounds, seed, sends, len(acked["laptop"])+len(acked["phone"]), unacked, kills, handled, delivered, dups, time.Since(start).Round(time.Second))
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
