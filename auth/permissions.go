package auth

// Action is something a principal does on a channel. Each action is checked
// on its own list: being allowed to send says nothing about subscribing.
type Action string

const (
	ActionSend      Action = "send"      // event to one node
	ActionRequest   Action = "request"   // request to a handler
	ActionPublish   Action = "publish"   // fan-out event
	ActionSubscribe Action = "subscribe" // receive events
	ActionHandle    Action = "handle"    // receive requests
)

// Permissions holds one pattern list per action. A channel is allowed for
// an action when any pattern in that action's list matches; an empty list
// allows nothing, so a forgotten field fails closed.
type Permissions struct {
	Send      []Pattern `json:"send,omitempty"`
	Request   []Pattern `json:"request,omitempty"`
	Publish   []Pattern `json:"publish,omitempty"`
	Subscribe []Pattern `json:"subscribe,omitempty"`
	Handle    []Pattern `json:"handle,omitempty"`
}

// list returns the pattern list for a, or nil for an unknown action.
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
	}
	return nil
}

// Allows reports whether action a is permitted on channel. Unknown actions,
// invalid channels and a nil receiver are all denied. It does not allocate.
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

// AllPermissions returns permissions allowing every action on ">" (every
// non-control channel). Each call returns fresh slices.
func AllPermissions() Permissions {
	all := func() []Pattern { return []Pattern{">"} }
	return Permissions{Send: all(), Request: all(), Publish: all(), Subscribe: all(), Handle: all()}
}

func (p Permissions) clone() Permissions {
	return Permissions{
		Send:      clonePatterns(p.Send),
		Request:   clonePatterns(p.Request),
		Publish:   clonePatterns(p.Publish),
		Subscribe: clonePatterns(p.Subscribe),
		Handle:    clonePatterns(p.Handle),
	}
}

func clonePatterns(ps []Pattern) []Pattern {
	if ps == nil {
		return nil
	}
	return append([]Pattern(nil), ps...)
}
