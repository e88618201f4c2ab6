package broker

import (
	"slices"
	"strings"

	"busbar/auth"
)

// subIndex finds the subscribers of a channel among exact subscriptions
// and wildcard patterns (auth.Pattern's grammar) without scanning them:
// an exact channel is one map lookup; a dotted pattern lives in a tree
// with one level per token, so matching walks at most two branches ("the
// token", "*") per token of the channel, plus the ">" list of each node
// on the way; a namespaced pattern is one of four keys (namespace or "*",
// path, "*" or ">"). The cost of routing a message therefore depends on the
// channel's length and on how many subscriptions match it, not on how
// many exist.
//
// Lists are replaced on change, never modified, so a match without
// wildcards returns the stored slice itself. Not safe for concurrent use:
// the owner locks.
type subIndex[T comparable] struct {
	exact map[string][]T
	tree  *subNode[T]       // dotted patterns
	ns    map[[2]string][]T // namespaced patterns by their two sides
	wild  int               // how many pattern entries exist
	all   []T               // the pattern ">" alone
}

type subNode[T comparable] struct {
	next map[string]*subNode[T] // by token; "*" is the single-token wildcard
	here []T                    // patterns ending at this node
	rest []T                    // patterns ending with ">" after this node
}

func newSubIndex[T comparable]() *subIndex[T] {
	return &subIndex[T]{exact: map[string][]T{}, ns: map[[2]string][]T{}, tree: &subNode[T]{}}
}

// add records v under name (a channel or a pattern); adding it twice is
// one entry.
func (x *subIndex[T]) add(name string, v T) {
	if !auth.IsPattern(name) {
		if l := x.exact[name]; !slices.Contains(l, v) {
			x.exact[name] = append(slices.Clip(l), v)
		}
		return
	}
	get, set := x.patternSlot(name, true)
	if l := get(); !slices.Contains(l, v) {
		set(append(slices.Clip(l), v))
		x.wild++
	}
}

// remove drops v from name.
func (x *subIndex[T]) remove(name string, v T) {
	if !auth.IsPattern(name) {
		l := x.exact[name]
		switch i := slices.Index(l, v); {
		case i < 0:
		case len(l) == 1:
			delete(x.exact, name)
		default:
			x.exact[name] = slices.Delete(slices.Clone(l), i, i+1)
		}
		return
	}
	get, set := x.patternSlot(name, false)
	if get == nil {
		return
	}
	l := get()
	i := slices.Index(l, v)
	if i < 0 {
		return
	}
	x.wild--
	if len(l) > 1 {
		set(slices.Delete(slices.Clone(l), i, i+1))
		return
	}
	set(nil)
	x.prune(name)
}

// patternSlot returns how to read and replace the list of pattern name,
// creating its place when create is set (else nil when there is none).
func (x *subIndex[T]) patternSlot(name string, create bool) (get func() []T, set func([]T)) {
	if name == ">" {
		return func() []T { return x.all }, func(l []T) { x.all = l }
	}
	if i := strings.IndexByte(name, ':'); i >= 0 {
		key := [2]string{name[:i], name[i+1:]}
		return func() []T { return x.ns[key] }, func(l []T) {
			if len(l) == 0 {
				delete(x.ns, key)
			} else {
				x.ns[key] = l
			}
		}
	}
	n := x.tree
	for {
		tok, rest, more := strings.Cut(name, ".")
		if tok == ">" {
			return func() []T { return n.rest }, func(l []T) { n.rest = l }
		}
		child := n.next[tok]
		if child == nil {
			if !create {
				return nil, nil
			}
			if n.next == nil {
				n.next = map[string]*subNode[T]{}
			}
			child = &subNode[T]{}
			n.next[tok] = child
		}
		n = child
		if !more {
			return func() []T { return n.here }, func(l []T) { n.here = l }
		}
		name = rest
	}
}

// prune removes the empty branches of the tree on a dotted pattern's
// path.
func (x *subIndex[T]) prune(name string) {
	if name == ">" || strings.IndexByte(name, ':') >= 0 {
		return
	}
	toks := strings.Split(name, ".")
	if toks[len(toks)-1] == ">" {
		toks = toks[:len(toks)-1]
	}
	path := []*subNode[T]{x.tree}
	for _, t := range toks {
		n := path[len(path)-1].next[t]
		if n == nil {
			return
		}
		path = append(path, n)
	}
	for i := len(path) - 1; i > 0; i-- {
		n := path[i]
		if len(n.here) > 0 || len(n.rest) > 0 || len(n.next) > 0 {
			return
		}
		delete(path[i-1].next, toks[i-1])
	}
}

// match returns the entries whose name matches channel, each once. The
// result of a channel with no wildcard subscriptions about is the stored
// slice: the caller must not modify it.
func (x *subIndex[T]) match(channel string) []T {
	exact := x.exact[channel]
	if x.wild == 0 || strings.HasPrefix(channel, "bus.") {
		return exact
	}
	out := slices.Clip(exact)
	add := func(vs []T) {
		for _, v := range vs {
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	add(x.all)
	if i := strings.IndexByte(channel, ':'); i >= 0 {
		ns, path := channel[:i], channel[i+1:]
		for _, n := range [2]string{ns, "*"} {
			for _, p := range [3]string{path, "*", ">"} {
				add(x.ns[[2]string{n, p}])
			}
		}
		return out
	}
	x.tree.walk(channel, add)
	return out
}

// walk calls add with the entries of every pattern in n's subtree that
// matches the rest of a channel, ch.
func (n *subNode[T]) walk(ch string, add func([]T)) {
	add(n.rest) // ">" here matches the one or more tokens left
	tok, rest, more := strings.Cut(ch, ".")
	for _, key := range [2]string{tok, "*"} {
		child := n.next[key]
		if child == nil {
			continue
		}
		if more {
			child.walk(rest, add)
		} else {
			add(child.here)
		}
	}
}
