package auth

import "fmt"

// MaxChannelLen is the longest channel name, in bytes.
const MaxChannelLen = 128

// controlToken is the first token reserved for the broker's control traffic.
const controlToken = "bus"

// tokenByte reports whether c may appear in a channel token.
func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
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

// firstToken returns s up to its first '.'.
func firstToken(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			return s[:i]
		}
	}
	return s
}

func badChannel(name, problem string, at int) error {
	return fmt.Errorf("%w %q: %s at byte %d", ErrBadChannel, clip(name), problem, at)
}

// ValidChannel returns nil if name is a channel a client may use, or an
// error wrapping ErrBadChannel saying why not. Names whose first token is
// "bus" are refused: that namespace is the broker's control traffic.
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
// traffic: same syntax, but the first token must be "bus" and at least one
// more token must follow ("bus" alone is valid for neither).
func ValidControlChannel(name string) error {
	if p, at := channelSyntax(name); p != "" {
		return badChannel(name, p, at)
	}
	if firstToken(name) != controlToken || len(name) == len(controlToken) {
		return fmt.Errorf("%w %q: control channels are %q followed by at least one token", ErrBadChannel, clip(name), controlToken+".")
	}
	return nil
}
