package auth

import (
	"fmt"
	"strings"
)

// MaxChannelLen is the longest channel name, in bytes, in either form.
const MaxChannelLen = 128

// controlToken is the first token reserved for the broker's control traffic.
const controlToken = "bus"

// nsSep separates a namespaced (MoonBridge) channel's namespace from its
// path: "myplugin:events".
const nsSep = ':'

// tokenByte reports whether c may appear in a dotted channel's token.
func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// partByte reports whether c may appear in either part of a namespaced
// channel: lower-case letters, digits and "_ . -", as MoonBridge (and
// Minecraft's plugin channels) spell them.
func partByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// channelSyntax checks the syntax shared by normal and control channels and
// returns "" or a static description of the first problem plus its byte
// offset. It never allocates, so Pattern.Match can use it.
func channelSyntax(s string) (problem string, at int) {
	if len(s) == 0 {
		return "empty", 0
	}
	if len(s) > MaxChannelLen {
		return "longer than MaxChannelLen", MaxChannelLen
	}
	if i := strings.IndexByte(s, nsSep); i >= 0 {
		return namespacedSyntax(s, i)
	}
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '.' {
			if i == start {
				return "empty token", i
			}
			start = i + 1
			continue
		}
		if !tokenByte(c) {
			return "invalid byte (want [A-Za-z0-9_-] or '.')", i
		}
	}
	if start == len(s) {
		return "empty token", len(s)
	}
	return "", 0
}

// namespacedSyntax checks a name in the MoonBridge form namespace:path,
// whose first ':' is at colon: two non-empty parts of [a-z0-9_.-]. A '.'
// inside a part is an ordinary byte, not a token separator.
func namespacedSyntax(s string, colon int) (problem string, at int) {
	if colon == 0 {
		return "empty namespace before ':'", 0
	}
	if colon == len(s)-1 {
		return "empty path after ':'", len(s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == colon:
		case c == nsSep:
			return "second ':' (namespace:path has exactly one)", i
		case c >= 'A' && c <= 'Z':
			return "upper-case byte in a namespace:path name (want [a-z0-9_.-])", i
		case !partByte(c):
			return "invalid byte in a namespace:path name (want [a-z0-9_.-])", i
		}
	}
	return "", 0
}

// namespaced reports whether a syntactically valid channel (or pattern)
// has the namespace:path form.
func namespaced(s string) bool { return strings.IndexByte(s, nsSep) >= 0 }

// firstToken returns s up to its first '.' or ':': the dotted name's first
// token, or the first token of a namespace ("bus" for "bus.x:y").
func firstToken(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' || s[i] == nsSep {
			return s[:i]
		}
	}
	return s
}

func badChannel(name, problem string, at int) error {
	return fmt.Errorf("%w %q: %s at byte %d", ErrBadChannel, clip(name), problem, at)
}

// ValidChannel returns nil if name is a channel a client may use, or an
// error wrapping ErrBadChannel saying why not. Two forms are valid:
//   - dotted: tokens of [A-Za-z0-9_-] separated by single '.'
//     ("orders.created");
//   - namespaced (MoonBridge): namespace ':' path, each a non-empty run of
//     [a-z0-9_.-], exactly one ':' ("myplugin:events", "my.mod:chat.v2").
//
// Names whose first token is "bus" are refused in both forms ("bus.x",
// "bus:x", "bus.y:x"): that namespace is the broker's control traffic.
func ValidChannel(name string) error {
	if p, at := channelSyntax(name); p != "" {
		return badChannel(name, p, at)
	}
	if firstToken(name) == controlToken {
		return fmt.Errorf("%w %q: first token %q is reserved for control traffic", ErrBadChannel, clip(name), controlToken)
	}
	return nil
}

// ValidControlChannel is ValidChannel's complement for the broker's own
// traffic: dotted syntax only, the first token must be "bus" and at least
// one more token must follow ("bus" alone is valid for neither).
func ValidControlChannel(name string) error {
	if p, at := channelSyntax(name); p != "" {
		return badChannel(name, p, at)
	}
	if firstToken(name) != controlToken || len(name) == len(controlToken) || namespaced(name) {
		return fmt.Errorf("%w %q: control channels are %q followed by at least one token", ErrBadChannel, clip(name), controlToken+".")
	}
	return nil
}
