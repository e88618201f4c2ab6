package ops

import (
	"net/http"

	"busbar/broker"
	"busbar/relay"
	"busbar/wire"
)

// Status is the JSON of StatusPath: the bus as this broker sees it.
type Status struct {
	Broker string `json:"broker"` // the broker's node name
	Ready  bool   `json:"ready"`
	// NotReady says why the broker is not ready; empty when it is.
	NotReady    string `json:"not_ready,omitempty"`
	Connections int    `json:"connections"`
	// Nodes are what `busbar ls --json` prints: every node of the bus.
	Nodes []wire.NodeInfo `json:"nodes"`
	// Services are what `busbar ls --services --json` prints.
	Services   []wire.ServiceInfo     `json:"services"`
	Namespaces []broker.NamespaceInfo `json:"namespaces"`
	// Counters are the broker's counters by metric name, less the
	// busbar_ prefix and _total suffix (docs/operations.md#metrics).
	Counters map[string]int64 `json:"counters"`
	// Dropped counts discarded messages by reason.
	Dropped map[string]int64 `json:"dropped"`
	// Relay is the durable relay store's figures; absent when this broker
	// is not a relay.
	Relay *relay.Stats `json:"relay,omitempty"`
}

// ReadStatus returns the broker's status.
func (o Options) ReadStatus() Status {
	b := o.Broker
	st := b.Stats()
	s := Status{Broker: b.Name(), Ready: true, Connections: b.Connections(), Nodes: b.Directory(), Services: b.Services(),
		Namespaces: b.Namespaces(), Counters: map[string]int64{}, Dropped: map[string]int64{}}
	if err := o.notReady(); err != nil {
		s.Ready, s.NotReady = false, err.Error()
	}
	for _, k := range counters {
		s.Counters[k.name] = k.get(&st)
	}
	for _, r := range broker.DropReasons() {
		s.Dropped[r.String()] = st.Drops[r]
	}
	if rs, ok := b.RelayStats(); ok {
		s.Relay = &rs
	}
	return s
}

func (o Options) status(w http.ResponseWriter, _ *http.Request) { writeJSON(w, o.ReadStatus()) }
