package cli

import (
	"encoding/json"
	"time"

	"busbar/durable"
	"busbar/wire"
)

// What the --json outputs print where the library's own JSON would break
// the CLI's one convention: field names in lower snake_case
// (docs/cli.md#json-output). The protocol's bodies keep their names on
// the wire (bus.announce's schemaVersion is bedrock's), and device.db
// keeps the events it stored; only what the CLI prints is renamed.

// serviceJSON is one registry record (ls --services --json, ls --watch
// --json).
type serviceJSON struct {
	Service       string                  `json:"service"`
	Version       string                  `json:"version"`
	SchemaVersion int                     `json:"schema_version"`
	Meta          json.RawMessage         `json:"meta,omitempty"`
	Channels      []string                `json:"channels,omitempty"`
	Address       string                  `json:"address"`
	IID           string                  `json:"iid"`
	Provenance    wire.RegisterProvenance `json:"provenance"`
	Collision     bool                    `json:"collision,omitempty"`
	Group         string                  `json:"group,omitempty"`
}

func serviceView(s wire.ServiceInfo) serviceJSON {
	return serviceJSON{s.Service, s.Version, s.SchemaVersion, s.Meta, s.Channels, s.Address, s.IID, s.Provenance, s.Collision, s.Group}
}

func servicesView(ss []wire.ServiceInfo) []serviceJSON {
	out := make([]serviceJSON, 0, len(ss))
	for _, s := range ss {
		out = append(out, serviceView(s))
	}
	return out
}

// serviceEventJSON is one change of the registry (ls --watch --json).
type serviceEventJSON struct {
	Op      wire.ServiceOp `json:"op"`
	Service serviceJSON    `json:"service"`
}

// eventJSON is one delivery event (durable status --json).
type eventJSON struct {
	Kind      string    `json:"kind"`
	Time      time.Time `json:"time"`
	MessageID string    `json:"message_id,omitempty"`
	Group     string    `json:"group,omitempty"`
	Peer      string    `json:"peer,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Version   uint16    `json:"version,omitempty"`
	Error     string    `json:"error,omitempty"`
	RelaySeq  uint64    `json:"relay_seq,omitempty"`
}

func eventsView(evs []durable.Event) []eventJSON {
	out := make([]eventJSON, 0, len(evs))
	for _, e := range evs {
		v := eventJSON{Kind: e.Kind, Time: e.Time, Group: e.Group, Peer: e.Peer, Reason: e.Reason, Version: e.Version, Error: e.Err, RelaySeq: e.RelaySeq}
		if !e.MessageID.IsZero() {
			v.MessageID = e.MessageID.String()
		}
		out = append(out, v)
	}
	return out
}
