package hotpath

import "busbar/wire"

// PrefixLen is the length of a stream frame's length prefix, which
// ForwardLen counts and wire.MaxMessageBytes does not.
const PrefixLen = prefixLen

// ForwardLen is the length of what AppendForward appends for v, from and
// withTTL, its length prefix included, so a caller can reserve exactly
// that room before it appends (and refuse a frame the stamp takes past
// wire.MaxMessageBytes before it delivers it anywhere). It is known
// without appending only for a View whose headers arrived sorted; ok is
// false for the others.
func ForwardLen(v *View, from string, withTTL bool) (n int, ok bool) {
	if !v.sorted {
		return 0, false
	}
	n = prefixLen + v.hdrEnd - (v.fromEnd - v.fromAt) + len(wire.HeaderFrom) + len(": ") + len(from) + 1
	if withTTL {
		n += len(wire.HeaderTTL) + len(": ") + len(ttlSlot) - (v.ttlEnd - v.ttlAt)
	}
	return n + len(delim) + len(v.frame) - v.bodyStart, true
}
