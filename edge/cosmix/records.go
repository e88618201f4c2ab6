package cosmix

import (
	"encoding/json"
	"math"
	"runtime/debug"
	"slices"
	"sync"
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

// NodeInfo is noded.info's reply (cosmix-lib-bus NodeInfo), its fields
// in noded's order: node, wg_ip (the host of the listener, as noded's is
// the host of its bind address), noded, uptime_s, service_count,
// schema_version; noded leaves mesh and meta out, as busbar does.
type NodeInfo struct {
	Node          string       `json:"node"`
	WgIP          *string      `json:"wg_ip,omitempty"`
	Noded         *ServiceInfo `json:"noded,omitempty"`
	UptimeS       uint64       `json:"uptime_s"`
	ServiceCount  uint16       `json:"service_count"`
	SchemaVersion int          `json:"schema_version"`
}

// MaxServiceCount is the largest service_count noded.info reports: the
// field is a u16 in cosmix-lib-bus's NodeInfo, and a larger number would
// not parse there, so a bus with more records reports this many.
const MaxServiceCount = math.MaxUint16

// serviceCount is n as noded.info's service_count, held at
// MaxServiceCount.
func serviceCount(n int) uint16 { return uint16(min(n, MaxServiceCount)) }

// build is busbar's own build as noded.info's "noded" record shows it, as
// noded shows its cosmix_buildinfo: the VCS revision (git_sha), whether
// the tree was modified (git_dirty), and the time of that revision
// (build_time: Go records no build time; the revision's time is the
// nearest it has). Each is absent when the binary carries no VCS stamp
// (go test, go run, a build outside a checkout).
type build struct {
	gitSHA, buildTime *string
	gitDirty          *bool
}

var busbarBuild = sync.OnceValue(func() build {
	var b build
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	for _, kv := range bi.Settings {
		v := kv.Value
		switch kv.Key {
		case "vcs.revision":
			b.gitSHA = &v
		case "vcs.time":
			b.buildTime = &v
		case "vcs.modified":
			d := v == "true"
			b.gitDirty = &d
		}
	}
	return b
})

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
