package auth

import (
	"fmt"
	"strings"

	"busbar/wire"
)

func nodeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
}

// ValidNodeName returns nil or an error wrapping ErrBadNodeName. Node names
// are address labels (wire.ValidLabel: 1..63 bytes of [a-z0-9-], no leading
// or trailing hyphen), so every node is reachable as <node>.bus.
func ValidNodeName(node string) error {
	if err := wire.ValidLabel(node); err != nil {
		return fmt.Errorf("%w: %v", ErrBadNodeName, err)
	}
	return nil
}

// Node patterns (Principal.Nodes) are deliberately simpler than channel
// patterns because node names contain no dots. Three forms:
//
//	"*"        any valid node name
//	"worker-*" any node name starting with "worker-" plus at least one byte
//	"db-1"     exactly that name
//
// '*' may appear only as the last byte.
func validNodePattern(p Pattern) error {
	s := string(p)
	bad := func(why string) error {
		return fmt.Errorf("%w: node pattern %q: %s", ErrBadPattern, clip(s), why)
	}
	if s == "*" {
		return nil
	}
	prefix, wild := strings.CutSuffix(s, "*")
	if !wild {
		if err := ValidNodeName(s); err != nil {
			return bad("not a valid node name or prefix*")
		}
		return nil
	}
	switch {
	case len(prefix) >= wire.MaxLabelLen:
		return bad("prefix too long to leave room for a match")
	case prefix[0] == '-':
		return bad("leading hyphen")
	}
	for i := 0; i < len(prefix); i++ {
		if !nodeByte(prefix[i]) {
			return bad("'*' is allowed only at the end, after [a-z0-9-]")
		}
	}
	return nil
}

// matchNode reports whether a valid node name matches a validated node
// pattern.
func matchNode(p Pattern, node string) bool {
	s := string(p)
	if prefix, wild := strings.CutSuffix(s, "*"); wild {
		return len(node) > len(prefix) && strings.HasPrefix(node, prefix)
	}
	return s == node
}
