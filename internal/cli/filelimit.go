package cli

import (
	"cmp"
	"log/slog"
	"strconv"
	"strings"

	"busbar/broker"
	"busbar/edge"
	"busbar/edge/cosmix"
	"busbar/edge/moonbridge"
	"busbar/edge/trueseal"
)

// fileReserve is what serve keeps of the descriptor limit for what is
// not a peer's connection: its stores, listeners, log and the runtime's
// own (a running broker holds about 30).
const fileReserve = 64

// doorLimit is one door's most connections at once.
type doorLimit struct {
	door string
	max  uint64
}

// doorLimits are the connections serve's doors may hold at once: the
// broker's (MaxConnections, logging-in ones included), the connections
// of its HTTP listeners waiting for their token (one login pool of each
// kind, MaxHandshakes), and each foreign door that is on.
func (s *serveRun) doorLimits() []doorLimit {
	o := s.o
	lim := []doorLimit{
		{"--max-connections", uint64(o.broker.MaxConnections)},
		{"HTTP logging in", 2 * uint64(cmp.Or(o.broker.MaxHandshakes, broker.DefaultMaxHandshakes))},
	}
	if s.mb != nil {
		lim = append(lim, doorLimit{"--moonbridge", moonbridge.DefaultMaxConnections})
	}
	if o.truesealAddr != "" {
		lim = append(lim, doorLimit{"--trueseal", trueseal.DefaultMaxSessions})
	}
	if o.cosmixAddr != "" || o.cosmixSock != "" {
		lim = append(lim, doorLimit{"--cosmix", cosmix.DefaultMaxConns})
	}
	return lim
}

// checkFileLimit warns, at start, when the doors' limits and fileReserve
// do not fit in the process's descriptor limit (raised first to its hard
// limit): past it, an accept fails with "too many open files" and the
// door pauses (edge.Accept) until a connection closes, so a flood can
// make the broker refuse newcomers before its own limits would. It never
// stops the start: a small limit may be what the operator wants.
func checkFileLimit(log *slog.Logger, limits []doorLimit) {
	have, ok := edge.FileLimit()
	if !ok {
		return
	}
	need := uint64(fileReserve)
	var parts []string
	for _, l := range limits {
		need += l.max
		parts = append(parts, l.door+" "+strconv.FormatUint(l.max, 10))
	}
	if need <= have {
		return
	}
	log.Warn("the file-descriptor limit is below what the doors may hold: past it a door pauses its accepts until connections close; raise the limit (ulimit -n, systemd's LimitNOFILE) or lower --max-connections",
		"limit", have, "need", need, "doors", strings.Join(parts, ", ")+", reserve "+strconv.Itoa(fileReserve))
}
