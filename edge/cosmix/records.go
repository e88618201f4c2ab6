package cosmix

import (
	"encoding/json"
	"slices"
	"time"

	"busbar/wire"
)

// SchemaVersion is cosmix's ServiceInfo / NodeInfo record version
// (cosmix-lib-bus SCHEMA_VERSION).
const SchemaVersion = 1

// metaKey is the key of a cosmix service's announcement meta that holds
// the provenance its noded.register body gave.
const metaKey = "cosmix"

// Provenance is the build provenance a cosmix app sends in its
// noded.register body (cosmix-lib-bus RegisterProvenance); every field is
// optional.
type Provenance struct {
	Binary    *string         `json:"binary,omitempty"`
	Version   *string         `json:"version,omitempty"`
	GitSHA    *string         `json:"git_sha,omitempty"`
	GitDirty  *bool           `json:"git_dirty,omitempty"`
	BuildTime *string         `json:"build_time,omitempty"`
	PID       *uint32         `json:"pid,omitempty"`
	StartedAt *string         `json:"started_at,omitempty"`
	Meta      json.RawMessage `json:"meta,omitempty"`
}

// ServiceInfo is one element of noded.list's reply, in the field order
// cosmix-lib-bus writes it.
type ServiceInfo struct {
	Name string `json:"name"`
	Provenance
	RegisteredAt  string `json:"registered_at,omitempty"`
	SchemaVersion int    `json:"schema_version"`
}

// MarshalJSON writes the fields in cosmix's order, meta last.
func (si ServiceInfo) MarshalJSON() ([]byte, error) {
	type ordered struct {
		Name          string          `json:"name"`
		Binary        *string         `json:"binary,omitempty"`
		Version       *string         `json:"version,omitempty"`
		GitSHA        *string         `json:"git_sha,omitempty"`
		GitDirty      *bool           `json:"git_dirty,omitempty"`
		BuildTime     *string         `json:"build_time,omitempty"`
		PID           *uint32         `json:"pid,omitempty"`
		StartedAt     *string         `json:"started_at,omitempty"`
		RegisteredAt  string          `json:"registered_at,omitempty"`
		SchemaVersion int             `json:"schema_version"`
		Meta          json.RawMessage `json:"meta,omitempty"`
	}
	p := si.Provenance
	return wire.JSON(ordered{si.Name, p.Binary, p.Version, p.GitSHA, p.GitDirty, p.BuildTime, p.PID, p.StartedAt,
		si.RegisteredAt, si.SchemaVersion, p.Meta})
}

// NodeInfo is noded.info's reply (cosmix-lib-bus NodeInfo).
type NodeInfo struct {
	Node          string       `json:"node"`
	Noded         *ServiceInfo `json:"noded,omitempty"`
	UptimeS       uint64       `json:"uptime_s"`
	ServiceCount  int          `json:"service_count"`
	SchemaVersion int          `json:"schema_version"`
}

// serviceInfo is a registry record as noded.list shows it: a cosmix
// service with the provenance it registered with, a busbar service with
// its version and, in meta, its address, node and channels.
func serviceInfo(in wire.ServiceInfo) ServiceInfo {
	out := ServiceInfo{Name: in.Service, SchemaVersion: SchemaVersion,
		RegisteredAt: in.Provenance.At.UTC().Truncate(time.Second).Format(time.RFC3339)}
	if p, ok := cosmixProvenance(in); ok {
		out.Provenance = p
		return out
	}
	if in.Version != "" {
		v := in.Version
		out.Version = &v
	}
	meta := map[string]any{"address": in.Address, "node": in.Provenance.Node, "channels": in.Channels}
	if len(in.Meta) > 0 {
		meta["meta"] = in.Meta
	}
	out.Meta, _ = wire.JSON(meta)
	return out
}

// cosmixProvenance reads the provenance of a service a cosmix connection
// registered.
func cosmixProvenance(in wire.ServiceInfo) (Provenance, bool) {
	if !slices.Contains(in.Channels, CallChannel) || len(in.Meta) == 0 {
		return Provenance{}, false
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(in.Meta, &meta) != nil {
		return Provenance{}, false
	}
	raw, ok := meta[metaKey]
	if !ok {
		return Provenance{}, false
	}
	var p Provenance
	_ = json.Unmarshal(raw, &p) // checked when registered
	return p, true
}

// nodeRecord is a busbar node as noded.list shows it: its name, and in
// meta its address, the channels it handles and kind "node".
func nodeRecord(n wire.NodeInfo) ServiceInfo {
	meta, _ := wire.JSON(map[string]any{"kind": "node", "address": n.Node + ".bus", "handlers": n.Handlers})
	return ServiceInfo{Name: n.Node, SchemaVersion: SchemaVersion, Provenance: Provenance{Meta: meta}}
}
