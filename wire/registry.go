package wire

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Discovery commands (docs/discovery.md#wire), with the broker keeping the
// registry. All are requests to the broker except bus.service, the event a
// watcher receives.
const (
	CmdAnnounce = "bus.announce" // request: announce a service this node hosts (body: Announcement)
	CmdWithdraw = "bus.withdraw" // request: withdraw one (body: the service name)
	CmdWhois    = "bus.whois"    // request: the registry, or one service's instances (body: optional name)
	CmdWatch    = "bus.watch"    // request: the registry now, then a bus.service event per change
	CmdUnwatch  = "bus.unwatch"  // request: stop those events
	CmdService  = "bus.service"  // event, broker → watcher: a ServiceEvent
)

// ResultAmbiguous is the request error for a bare service name that more
// than one live instance announces: the caller must name the node.
const ResultAmbiguous Result = "AMBIGUOUS"

// Limits of an announcement.
const (
	MaxVersionLen = 64   // bytes of Announcement.Version
	MaxMetaBytes  = 4096 // bytes of Announcement.Meta, a JSON object
	MaxIIDLen     = 64   // bytes of an instance id
)

// Announcement is what a node says about one service it hosts: its name,
// version, schemaVersion and optional meta, and the channels it handles,
// which a registry needs (docs/discovery.md#announcing).
type Announcement struct {
	Service       string          `json:"service"`
	Version       string          `json:"version"`
	SchemaVersion int             `json:"schemaVersion"`
	Meta          json.RawMessage `json:"meta,omitempty"`
	Channels      []string        `json:"channels,omitempty"`
	// Group declares this instance interchangeable with every other
	// instance of the service that declares the same group: requests and
	// events to the bare service name are shared among them instead of
	// being AMBIGUOUS (docs/discovery.md#service-groups). A label, or ""
	// for none.
	Group string `json:"group,omitempty"`
}

// Check validates an announcement's own fields (channels are checked by
// the broker against the channel rules and the node's permissions).
func (a *Announcement) Check() error {
	if err := ValidLabel(a.Service); err != nil {
		return fmt.Errorf("service name: %w", err)
	}
	if len(a.Version) > MaxVersionLen || !utf8.ValidString(a.Version) {
		return fmt.Errorf("version must be UTF-8 of at most %d bytes", MaxVersionLen)
	}
	if a.Group != "" {
		if err := ValidLabel(a.Group); err != nil {
			return fmt.Errorf("group name: %w", err)
		}
	}
	if a.SchemaVersion < 0 {
		return fmt.Errorf("schemaVersion must not be negative")
	}
	if len(a.Meta) > 0 {
		if len(a.Meta) > MaxMetaBytes {
			return fmt.Errorf("meta is %d bytes, over the limit of %d", len(a.Meta), MaxMetaBytes)
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(a.Meta, &obj) != nil || obj == nil {
			return fmt.Errorf("meta must be a JSON object")
		}
	}
	return nil
}

// RegisterProvenance says who registered a record, when and over which
// connection (docs/discovery.md#announcing).
type RegisterProvenance struct {
	Node      string    `json:"node"`
	Broker    string    `json:"broker,omitempty"` // the broker the node is connected to (docs/cluster.md)
	Epoch     uint64    `json:"epoch"`            // the connection's epoch
	Remote    string    `json:"remote"`           // the connection's peer address
	Principal string    `json:"principal,omitempty"`
	At        time.Time `json:"at"`
}

// ServiceInfo is one live instance of a service in the broker's registry
// (docs/discovery.md#announcing). Two instances of one name are a
// collision, unless both declare the same Group: both are listed, both
// flagged, never merged (docs/discovery.md#collisions).
type ServiceInfo struct {
	Announcement
	Address    string             `json:"address"` // <service>.<node>.bus, which always reaches this instance
	IID        string             `json:"iid"`     // the announcing client instance
	Provenance RegisterProvenance `json:"provenance"`
	Collision  bool               `json:"collision,omitempty"` // another live instance announces the same name
}

// Collide reports whether instances of one service collide: more than one,
// and not all of one declared group (docs/discovery.md#service-groups).
func Collide(instances []*ServiceInfo) bool {
	if len(instances) < 2 {
		return false
	}
	g := instances[0].Group
	if g == "" {
		return true
	}
	for _, s := range instances[1:] {
		if s.Group != g {
			return true
		}
	}
	return false
}

// ServiceEvent is the body of bus.service.
type ServiceEvent struct {
	Op      ServiceOp   `json:"op"`
	Service ServiceInfo `json:"service"`
}

// ServiceOp is what happened to a registry record.
type ServiceOp string

const (
	ServiceUp        ServiceOp = "up"        // announced, re-announced, or its collision ended
	ServiceDown      ServiceOp = "down"      // withdrawn, or its node left (closed, replaced, lease expired)
	ServiceCollision ServiceOp = "collision" // another live instance now announces the same name
	// ServiceLost (no record) tells a watcher that events were dropped
	// for it (its queue was full) and that it no longer watches: it must
	// watch again for a fresh snapshot.
	ServiceLost ServiceOp = "lost"
)

// ValidIID reports whether s can be an instance id: 1 to MaxIIDLen bytes
// of ASCII letters, digits, '-', '_' and '.'.
func ValidIID(s string) error {
	if s == "" || len(s) > MaxIIDLen {
		return fmt.Errorf("an instance id must be 1 to %d bytes", MaxIIDLen)
	}
	if i := strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}); i >= 0 {
		return fmt.Errorf("an instance id may hold only letters, digits, '-', '_' and '.' (%q at %d)", s[i], i)
	}
	return nil
}

// Replicated state commands (docs/state.md#wire), with the broker holding
// every namespace. Bodies are package state's JSON types.
const (
	CmdStateSet     = "bus.state.set"     // request: a write or delete (body: state.Delta) → state.Result
	CmdStateOpen    = "bus.state.open"    // request: the owner opens a key for every writer (state.Query) → state.Result
	CmdStateGet     = "bus.state.get"     // request: one key (state.Result), one namespace (state.Snapshot), or all ([]state.Snapshot)
	CmdStateWatch   = "bus.state.watch"   // request: a namespace's snapshot, then a bus.state.delta event per applied delta
	CmdStateUnwatch = "bus.state.unwatch" // request: stop those events
	CmdStateDrop    = "bus.state.drop"    // request, state-admin: delete a whole namespace (state.Query) → no body
	CmdStateOwner   = "bus.state.owner"   // request, state-admin: give a namespace to another node (state.Transfer) → state.Snapshot
	CmdStateDelta   = "bus.state.delta"   // event, broker → watcher: a numbered state.Delta
	// CmdStateReset is an event, broker → watcher (body: state.Query): deltas
	// of the namespace were dropped for it (its queue was full) and it no
	// longer watches; it must watch again and merge the snapshot.
	CmdStateReset = "bus.state.reset"
)
