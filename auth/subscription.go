package auth

import (
	"fmt"
	"strings"
)

// IsPattern reports whether a subscription name is a wildcard pattern
// rather than one channel: channel names never hold '*' or '>', so a name
// that does is a pattern.
func IsPattern(name string) bool { return strings.ContainsAny(name, "*>") }

// ValidSubscription checks what a node may subscribe to: a channel
// (ValidChannel) or a wildcard pattern in the grammar of the permissions
// file (ParsePattern): "orders.*", "orders.>", "myplugin:*", "*:events",
// ">". A pattern whose first token is the reserved "bus" is refused, as a
// channel's is: control traffic is never subscribed to. Errors wrap
// ErrBadChannel.
func ValidSubscription(name string) error {
	if !IsPattern(name) {
		return ValidChannel(name)
	}
	if _, err := ParsePattern(name); err != nil {
		return fmt.Errorf("%w %q: not a channel, and not a pattern: %v", ErrBadChannel, clip(name), err)
	}
	if firstToken(name) == controlToken {
		return fmt.Errorf("%w %q: first token %q is reserved for control traffic", ErrBadChannel, clip(name), controlToken)
	}
	return nil
}

// Overlaps reports whether some channel matches both p and q, two valid
// patterns (a channel is a pattern without wildcards). It decides whether
// a wildcard subscription can ever receive anything its principal may
// receive. It does not allocate.
func (p Pattern) Overlaps(q Pattern) bool {
	a, b := string(p), string(q)
	if a == "" || b == "" {
		return false
	}
	if (firstToken(a) == controlToken) != (firstToken(b) == controlToken) {
		// Only a pattern spelling "bus" first reaches control channels,
		// and those are never reached by one that does not.
		return false
	}
	if a == ">" || b == ">" {
		return true
	}
	ac, bc := strings.IndexByte(a, nsSep), strings.IndexByte(b, nsSep)
	if ac >= 0 || bc >= 0 {
		return ac >= 0 && bc >= 0 && partsOverlap(a[:ac], b[:bc]) && partsOverlap(a[ac+1:], b[bc+1:])
	}
	for {
		at, arest, amore := strings.Cut(a, ".")
		bt, brest, bmore := strings.Cut(b, ".")
		if at == ">" || bt == ">" {
			return true // each side still has at least one token here
		}
		if at != "*" && bt != "*" && at != bt {
			return false
		}
		if !amore || !bmore {
			return amore == bmore
		}
		a, b = arest, brest
	}
}

// partsOverlap compares one side of two namespaced patterns, where "*"
// and ">" both stand for any part.
func partsOverlap(a, b string) bool {
	wild := func(s string) bool { return s == "*" || s == ">" }
	return wild(a) || wild(b) || a == b
}

// MayReceive reports whether the subscription name (a channel or a
// pattern) can receive anything under the channel action a: for a
// channel, Allows; for a pattern, whether one of a's patterns overlaps
// it. A wildcard subscription that passes still receives only the
// channels Allows permits, message by message.
func (p *Permissions) MayReceive(a Action, name string) bool {
	if !IsPattern(name) {
		return p.Allows(a, name)
	}
	if p == nil {
		return false
	}
	for _, pat := range p.list(a) {
		if pat.Overlaps(Pattern(name)) {
			return true
		}
	}
	return false
}
