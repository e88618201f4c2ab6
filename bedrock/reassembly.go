package bedrock

// Limits beyond the JavaScript protocol, for a Go process facing an
// untrusted medium (docs/bedrock.md#the-protocol): a frame announcing more
// than MaxGroupFrames frames, or a new group beyond MaxPendingGroups
// incomplete ones, is ignored (counted).
const (
	MaxGroupFrames   = 65536
	MaxPendingGroups = 1024
	// MaxPendingUnits bounds the code units buffered in incomplete groups
	// (8 MiB of UTF-16): a frame past it is ignored.
	MaxPendingUnits = 4 << 20
)

// Reassembler buffers the frames of multi-frame groups until they are
// complete (docs/bedrock.md#the-protocol): frames whose t disagrees with
// their group, with an out-of-range or duplicate sequence number, are
// ignored; a group that stays incomplete for ChunkTTLTicks after its last
// accepted frame is discarded by Sweep. It is not safe for concurrent use.
type Reassembler struct {
	groups  map[string]*group
	units   int // buffered in incomplete groups
	ignored int64
	expired int64
}

type group struct {
	t       int
	parts   map[int][]uint16
	size    int
	expires int64 // tick
}

// NewReassembler returns an empty reassembler.
func NewReassembler() *Reassembler { return &Reassembler{groups: map[string]*group{}} }

// Add takes frame f at tick now. It returns the whole encoded envelope
// when f completes its group: at once for a single-frame group (t == 1),
// which is never buffered.
func (r *Reassembler) Add(f Frame, now int64) ([]uint16, bool) {
	if f.T == 1 && f.S == 0 {
		return f.P, true
	}
	if f.T < 1 || f.T > MaxGroupFrames || f.S < 0 || f.S >= f.T {
		r.ignored++
		return nil, false
	}
	g := r.groups[f.C]
	switch {
	case g == nil:
		if len(r.groups) >= MaxPendingGroups {
			r.ignored++
			return nil, false
		}
		g = &group{t: f.T, parts: map[int][]uint16{}}
		r.groups[f.C] = g
	case g.t != f.T:
		r.ignored++ // a stray frame, e.g. from a sender that restarted mid-send
		return nil, false
	}
	if _, dup := g.parts[f.S]; dup {
		r.ignored++
		return nil, false
	}
	if r.units+len(f.P) > MaxPendingUnits {
		r.ignored++
		if len(g.parts) == 0 {
			delete(r.groups, f.C)
		}
		return nil, false
	}
	g.parts[f.S] = f.P
	g.size += len(f.P)
	r.units += len(f.P)
	g.expires = now + ChunkTTLTicks // each accepted frame renews the group
	if len(g.parts) < g.t {
		return nil, false
	}
	delete(r.groups, f.C)
	r.units -= g.size
	whole := make([]uint16, 0, g.size)
	for s := range g.t {
		whole = append(whole, g.parts[s]...)
	}
	return whole, true
}

// Sweep discards the groups whose expiry has passed at tick now.
func (r *Reassembler) Sweep(now int64) {
	for c, g := range r.groups {
		if now >= g.expires {
			delete(r.groups, c)
			r.units -= g.size
			r.expired++
		}
	}
}

// Pending is the number of incomplete groups; Ignored and Expired count
// the frames ignored and the groups discarded.
func (r *Reassembler) Pending() int   { return len(r.groups) }
func (r *Reassembler) Ignored() int64 { return r.ignored }
func (r *Reassembler) Expired() int64 { return r.expired }
