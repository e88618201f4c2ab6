package auth

// Action is something a principal does on a channel or, for the state
// actions, on a namespace of replicated state. Each action is checked on
// its own list: being allowed to send says nothing about subscribing, and
// being allowed to write a namespace says nothing about reading it.
type Action string

const (
	ActionSend      Action = "send"      // event to one node
	ActionRequest   Action = "request"   // request to a handler
	ActionPublish   Action = "publish"   // fan-out event
	ActionSubscribe Action = "subscribe" // receive events
	ActionHandle    Action = "handle"    // receive requests
	// ActionTap is seeing copies of other nodes' messages on a channel
	// (busbar tap). The broker shows a message only to a tapper that could
	// also have received it (docs/operations.md#busbar-tap).
	ActionTap Action = "tap"

	// The state actions apply to namespace names (see AllowsNamespace).
	ActionStateRead  Action = "state-read"  // get a key or snapshot, dump, watch
	ActionStateWrite Action = "state-write" // set or delete a key (ownership still applies)
	ActionStateAdmin Action = "state-admin" // create a namespace (becoming its owner), open its keys
)

// Permissions holds one pattern list per action. A channel (or namespace)
// is allowed for an action when any pattern in that action's list
// matches; an empty list allows nothing, so a forgotten field fails
// closed.
//
// The state lists are always written out, even when empty (null): a
// principals file that lacks them entirely predates them, and Load gives
// such a principal a default (see Load), which must never happen to one
// that was written without them on purpose.
type Permissions struct {
	Send      []Pattern `json:"send,omitempty"`
	Request   []Pattern `json:"request,omitempty"`
	Publish   []Pattern `json:"publish,omitempty"`
	Subscribe []Pattern `json:"subscribe,omitempty"`
	Handle    []Pattern `json:"handle,omitempty"`
	Tap       []Pattern `json:"tap,omitempty"`

	StateRead  []Pattern `json:"state_read"`
	StateWrite []Pattern `json:"state_write"`
	StateAdmin []Pattern `json:"state_admin"`

	// Relay allows pushing sealed blobs into the durable relay's inboxes
	// (bus.durable.push), which takes the relay's disk: off unless
	// granted (`busbar principal add --relay`). A principal allowed every
	// channel on ">" (the owner's "local") may push without it.
	Relay bool `json:"relay,omitempty"`
}

// MayRelay reports whether p may push to the durable relay: Relay, or
// every channel on ">".
func (p *Permissions) MayRelay() bool { return p.Relay || p.allChannels() }

// list returns the pattern list for a channel action, or nil for any
// other action.
func (p *Permissions) list(a Action) []Pattern {
	switch a {
	case ActionSend:
		return p.Send
	case ActionRequest:
		return p.Request
	case ActionPublish:
		return p.Publish
	case ActionSubscribe:
		return p.Subscribe
	case ActionHandle:
		return p.Handle
	case ActionTap:
		return p.Tap
	}
	return nil
}

// stateList returns the pattern list for a state action, or nil for any
// other action.
func (p *Permissions) stateList(a Action) []Pattern {
	switch a {
	case ActionStateRead:
		return p.StateRead
	case ActionStateWrite:
		return p.StateWrite
	case ActionStateAdmin:
		return p.StateAdmin
	}
	return nil
}

// Allows reports whether channel action a is permitted on channel.
// Unknown actions, the state actions (see AllowsNamespace), invalid
// channels and a nil receiver are all denied. It does not allocate.
func (p *Permissions) Allows(a Action, channel string) bool {
	if p == nil {
		return false
	}
	if prob, _ := channelSyntax(channel); prob != "" {
		return false
	}
	for _, pat := range p.list(a) {
		if pat.matchValid(channel) {
			return true
		}
	}
	return false
}

// AllowsNamespace reports whether state action a is permitted on the
// namespace ns, matched as Pattern.MatchNamespace does. Channel actions,
// unknown actions, the empty namespace and a nil receiver are all denied.
// It does not allocate.
func (p *Permissions) AllowsNamespace(a Action, ns string) bool {
	if p == nil {
		return false
	}
	for _, pat := range p.stateList(a) {
		if pat.MatchNamespace(ns) {
			return true
		}
	}
	return false
}

// AllPermissions returns permissions allowing every channel action on ">"
// (every non-control channel) and every state action on ">" (every
// namespace). Each call returns fresh slices.
func AllPermissions() Permissions {
	all := func() []Pattern { return []Pattern{">"} }
	return Permissions{
		Send: all(), Request: all(), Publish: all(), Subscribe: all(), Handle: all(), Tap: all(),
		StateRead: all(), StateWrite: all(), StateAdmin: all(),
	}
}

// AllChannels reports whether p allows every channel action (send,
// request, publish, subscribe, handle) on ">", as the "local" principal
// Bootstrap makes does: a principal that may already reach every node.
func (p *Permissions) AllChannels() bool { return p.allChannels() }

// allChannels reports whether p allows every channel action on ">": the
// permissions Bootstrap gave the "local" principal before the state
// lists existed.
func (p *Permissions) allChannels() bool {
	for _, a := range []Action{ActionSend, ActionRequest, ActionPublish, ActionSubscribe, ActionHandle} {
		has := false
		for _, pat := range p.list(a) {
			has = has || pat == ">"
		}
		if !has {
			return false
		}
	}
	return true
}

func (p Permissions) clone() Permissions {
	return Permissions{
		Send:       clonePatterns(p.Send),
		Request:    clonePatterns(p.Request),
		Publish:    clonePatterns(p.Publish),
		Subscribe:  clonePatterns(p.Subscribe),
		Handle:     clonePatterns(p.Handle),
		Tap:        clonePatterns(p.Tap),
		StateRead:  clonePatterns(p.StateRead),
		StateWrite: clonePatterns(p.StateWrite),
		StateAdmin: clonePatterns(p.StateAdmin),
		Relay:      p.Relay,
	}
}

func clonePatterns(ps []Pattern) []Pattern {
	if ps == nil {
		return nil
	}
	return append([]Pattern(nil), ps...)
}
