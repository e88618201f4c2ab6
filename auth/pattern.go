package auth

import (
	"fmt"
	"strings"
)

// Pattern is a NATS-style channel pattern: '.'-separated tokens where "*"
// matches exactly one token and ">" (last token only) matches one or more.
//
// Namespaced (MoonBridge) channels have patterns of their own form,
// namespace ':' path, where each side is a literal part or "*" (any
// part), and the path may also be ">" (the same as "*": a '.' inside a
// part separates nothing). "myplugin:*" matches every channel of the
// namespace myplugin, "*:events" the channel events of every namespace.
// The two forms never cross: a dotted pattern matches no namespaced
// channel and a namespaced pattern no dotted one, with one exception, the
// pattern ">" alone, which matches every channel of both forms.
//
// Wildcards never match the reserved first token "bus": ">" and "*.x" match
// no control channel. Only a pattern whose first token is literally "bus"
// (e.g. "bus.>") does, so control access is never granted by accident.
type Pattern string

// ParsePattern checks s and returns it as a Pattern. Errors wrap
// ErrBadPattern. The empty string is refused: in a config file it is a
// mistake, not a way to say "nothing" (use an empty list for that).
func ParsePattern(s string) (Pattern, error) {
	bad := func(why string) (Pattern, error) {
		return "", fmt.Errorf("%w %q: %s", ErrBadPattern, clip(s), why)
	}
	if s == "" {
		return bad("empty")
	}
	// A wildcard consumes at least one byte of channel per byte of pattern,
	// so a longer pattern could never match anything.
	if len(s) > MaxChannelLen {
		return bad("longer than MaxChannelLen")
	}
	if i := strings.IndexByte(s, nsSep); i >= 0 {
		if why := namespacedPattern(s[:i], s[i+1:]); why != "" {
			return bad(why)
		}
		return Pattern(s), nil
	}
	rest := s
	for i := 0; ; i++ {
		tok, next, more := strings.Cut(rest, ".")
		switch {
		case tok == "":
			return bad(fmt.Sprintf("token %d is empty", i))
		case tok == ">":
			if more {
				return bad(`">" must be the last token`)
			}
		case tok == "*":
		default:
			for j := 0; j < len(tok); j++ {
				if !tokenByte(tok[j]) {
					return bad(fmt.Sprintf("token %d %q: want [A-Za-z0-9_-], \"*\" or \">\"", i, tok))
				}
			}
		}
		if !more {
			return Pattern(s), nil
		}
		rest = next
	}
}

// namespacedPattern checks the two sides of a namespace:path pattern and
// returns "" or why it is malformed.
func namespacedPattern(ns, path string) string {
	switch {
	case ns == "":
		return "empty namespace before ':'"
	case path == "":
		return "empty path after ':'"
	case ns == ">":
		return `">" may stand for the path, not the namespace (use "*")`
	}
	for _, part := range []string{ns, path} {
		if part == "*" || part == ">" {
			continue
		}
		for j := 0; j < len(part); j++ {
			if !partByte(part[j]) {
				return fmt.Sprintf("%q: want [a-z0-9_.-] or \"*\" on each side of the one ':'", part)
			}
		}
	}
	return ""
}

// Match reports whether channel matches p. An invalid channel, the empty
// pattern and malformed patterns (e.g. ">" not last) match nothing.
// Match does not allocate.
func (p Pattern) Match(channel string) bool {
	if prob, _ := channelSyntax(channel); prob != "" {
		return false
	}
	return p.matchValid(channel)
}

// matchValid is Match for a channel already known to be syntactically
// valid; Permissions.Allows validates once and then tries each pattern.
func (p Pattern) matchValid(channel string) bool {
	pat := string(p)
	if pat == "" {
		return false
	}
	if firstToken(channel) == controlToken && firstToken(pat) != controlToken {
		return false
	}
	if pat == ">" {
		return true
	}
	if pc, cc := strings.IndexByte(pat, nsSep), strings.IndexByte(channel, nsSep); pc >= 0 || cc >= 0 {
		return pc >= 0 && cc >= 0 && matchPart(pat[:pc], channel[:cc]) &&
			(pat[pc+1:] == ">" || matchPart(pat[pc+1:], channel[cc+1:]))
	}
	ch := channel // invariant: non-empty, no empty tokens
	for {
		pt, prest, pmore := strings.Cut(pat, ".")
		if pt == ">" {
			return !pmore // ch still has at least one token here
		}
		ct, crest, cmore := strings.Cut(ch, ".")
		if pt != "*" && pt != ct {
			return false
		}
		if !pmore || !cmore {
			return pmore == cmore
		}
		pat, ch = prest, crest
	}
}

// matchPart matches one side of a namespaced channel.
func matchPart(pat, part string) bool { return pat == "*" || pat == part }

// MatchNamespace reports whether the replicated-state namespace ns
// matches p. Namespace names are not channel names (package state allows
// any UTF-8 without whitespace or control characters), so the rules are
// Match's, applied to ns split at '.':
//   - a literal token matches only the same token, so a namespace token
//     with bytes a pattern cannot spell ("home/x", "é") is granted only
//     by a wildcard;
//   - "*" matches exactly one non-empty token;
//   - ">" matches the non-empty rest, whatever it holds (">" alone
//     matches every namespace);
//   - there is no reserved first token: namespaces carry no control
//     traffic, so ">" matches a namespace "bus.x" too;
//   - a namespaced pattern ("myplugin:*") matches, as it matches
//     channels, the namespaces of the form namespace:path (exactly one
//     ':'), side by side; dotted patterns keep the rules above, whatever
//     ':' a namespace holds.
//
// The empty namespace and malformed patterns match nothing. It does not
// allocate.
func (p Pattern) MatchNamespace(ns string) bool {
	pat := string(p)
	if pat == "" || ns == "" {
		return false
	}
	if pc := strings.IndexByte(pat, nsSep); pc >= 0 {
		nc := strings.IndexByte(ns, nsSep)
		if nc < 0 || strings.IndexByte(ns[nc+1:], nsSep) >= 0 || nc == 0 || nc == len(ns)-1 {
			return false
		}
		return matchPart(pat[:pc], ns[:nc]) && (pat[pc+1:] == ">" || matchPart(pat[pc+1:], ns[nc+1:]))
	}
	for {
		pt, prest, pmore := strings.Cut(pat, ".")
		if pt == ">" {
			return !pmore && ns != ""
		}
		nt, nrest, nmore := strings.Cut(ns, ".")
		if nt == "" || pt != "*" && (pt != nt || !literalToken(pt)) {
			return false
		}
		if !pmore || !nmore {
			return pmore == nmore
		}
		pat, ns = prest, nrest
	}
}

// literalToken reports whether tok is a token a valid pattern may spell
// literally: one or more of [A-Za-z0-9_-].
func literalToken(tok string) bool {
	for i := 0; i < len(tok); i++ {
		if !tokenByte(tok[i]) {
			return false
		}
	}
	return tok != ""
}
