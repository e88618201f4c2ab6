package wire

import (
	"errors"
	"fmt"
	"strings"
)

// Address limits (hostname rules, RFC 1123).
const (
	MaxLabelLen   = 63  // bytes in one label
	MaxAddressLen = 253 // bytes in a whole address or target, as written and in display form
)

// addrSuffix is the label that ends a full address.
const addrSuffix = "bus"

// ErrBadAddress matches every address and target parse error.
var ErrBadAddress = errors.New("wire: invalid address")

// AddressError says why an address or target is invalid.
type AddressError struct {
	Input  string
	Reason string
}

func (e *AddressError) Error() string {
	return fmt.Sprintf("wire: invalid address %q: %s", clip(e.Input), e.Reason)
}

// Unwrap makes errors.Is(err, ErrBadAddress) true.
func (e *AddressError) Unwrap() error { return ErrBadAddress }

// Address is a local bus address: <node>.bus, <service>.<node>.bus or
// <sub>.<service>.<node>.bus. Sub is opaque to the broker; the destination
// service interprets it.
type Address struct {
	Sub, Service, Node string
}

// String is the display form; it always ends in ".bus".
func (a Address) String() string {
	var b strings.Builder
	for _, l := range []string{a.Sub, a.Service, a.Node} {
		if l != "" {
			b.WriteString(l)
			b.WriteByte('.')
		}
	}
	b.WriteString(addrSuffix)
	return b.String()
}

// ParseAddress parses a local address (docs/protocol.md#addresses). The ".bus"
// suffix is optional on two- and three-label input; "x.bus" is node x. A
// bare "<service>" is not an address: ParseAddress refuses it, and callers
// resolve it through the registry (see ParseTarget).
func ParseAddress(s string) (Address, error) {
	fail := func(reason string, args ...any) (Address, error) {
		return Address{}, &AddressError{Input: s, Reason: fmt.Sprintf(reason, args...)}
	}
	if s == "" {
		return fail("empty")
	}
	if len(s) > MaxAddressLen {
		return fail("%d bytes, limit %d", len(s), MaxAddressLen)
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if reason := checkLabel(l); reason != "" {
			return fail("%s", reason)
		}
	}
	if labels[len(labels)-1] == addrSuffix {
		labels = labels[:len(labels)-1]
	} else if len(labels) == 1 {
		return fail("a bare service name is not an address; resolve it through the registry")
	}
	var a Address
	switch len(labels) {
	case 0:
		return fail("no node before %q", "."+addrSuffix)
	case 1:
		a = Address{Node: labels[0]}
	case 2:
		a = Address{Service: labels[0], Node: labels[1]}
	case 3:
		a = Address{Sub: labels[0], Service: labels[1], Node: labels[2]}
	default:
		return fail("%d labels; an address has at most <sub>.<service>.<node>.bus", len(labels))
	}
	return a, nil
}

// ValidLabel reports whether s is one address label (a node or service
// name): nil, or an error matching ErrBadAddress that says why.
func ValidLabel(s string) error {
	if reason := checkLabel(s); reason != "" {
		return &AddressError{Input: s, Reason: reason}
	}
	return nil
}

// checkLabel applies hostname rules: 1–63 lowercase letters, digits and
// inner hyphens. It returns "" for a valid label, else the reason.
func checkLabel(l string) string {
	switch {
	case l == "":
		return "empty label"
	case len(l) > MaxLabelLen:
		return fmt.Sprintf("label of %d bytes, limit %d", len(l), MaxLabelLen)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Sprintf("label %q starts or ends with a hyphen", clip(l))
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Sprintf("label %q has %q; only lowercase letters, digits and hyphens are allowed", clip(l), string(rune(c)))
		}
	}
	return ""
}

// TargetKind tells which form a target has.
type TargetKind uint8

// The target forms.
const (
	TargetService   TargetKind = iota + 1 // bare <service>, resolved through the registry
	TargetAddress                         // a local Address
	TargetCrossMesh                       // <local-bus>@<mesh-fqdn>, refused by the router
)

func (k TargetKind) String() string {
	switch k {
	case TargetService:
		return "service"
	case TargetAddress:
		return "address"
	case TargetCrossMesh:
		return "cross-mesh"
	}
	return "invalid"
}

// Target is anything a message may be sent to (docs/protocol.md#addresses).
type Target struct {
	Kind    TargetKind
	Service string  // TargetService: the service name
	Addr    Address // TargetAddress, and the local part of TargetCrossMesh
	Mesh    string  // TargetCrossMesh: the mesh FQDN
}

// String is the display form: the service name, the address with ".bus",
// or "<address>@<mesh>".
func (t Target) String() string {
	switch t.Kind {
	case TargetService:
		return t.Service
	case TargetAddress:
		return t.Addr.String()
	case TargetCrossMesh:
		return t.Addr.String() + "@" + t.Mesh
	}
	return ""
}

// ErrCrossMesh is what a router returns for a TargetCrossMesh target:
// federation between meshes is reserved and not implemented.
var ErrCrossMesh = errors.New("wire: cross-mesh targets (<local-bus>@<mesh-fqdn>) are reserved; federation is not implemented")

// ParseTarget parses any target form: a bare service, a local address, or
// the reserved cross-mesh form <local-bus>@<mesh-fqdn>, whose local part is
// a local address and whose mesh part is a lowercase FQDN of two or more
// labels.
func ParseTarget(s string) (Target, error) {
	if len(s) > MaxAddressLen {
		return Target{}, &AddressError{Input: s, Reason: fmt.Sprintf("%d bytes, limit %d", len(s), MaxAddressLen)}
	}
	if local, mesh, ok := strings.Cut(s, "@"); ok {
		return parseCrossMesh(s, local, mesh)
	}
	if s != "" && !strings.Contains(s, ".") {
		if reason := checkLabel(s); reason != "" {
			return Target{}, &AddressError{Input: s, Reason: reason}
		}
		if s == addrSuffix {
			return Target{}, &AddressError{Input: s, Reason: `"bus" is the address suffix, not a service name`}
		}
		return Target{Kind: TargetService, Service: s}, nil
	}
	a, err := ParseAddress(s)
	if err != nil {
		return Target{}, err
	}
	return Target{Kind: TargetAddress, Addr: a}, nil
}

// checkDisplay keeps the display form, which may add ".bus", within
// MaxAddressLen, so every target's String parses back.
func checkDisplay(s string, t Target) (Target, error) {
	if n := len(t.String()); n > MaxAddressLen {
		return Target{}, &AddressError{Input: s, Reason: fmt.Sprintf("%d bytes in display form, limit %d", n, MaxAddressLen)}
	}
	return t, nil
}

func parseCrossMesh(s, local, mesh string) (Target, error) {
	fail := func(reason string) (Target, error) {
		return Target{}, &AddressError{Input: s, Reason: reason}
	}
	if strings.Contains(mesh, "@") {
		return fail(`more than one "@"`)
	}
	a, err := ParseAddress(local)
	if err != nil {
		return fail("local part: " + err.(*AddressError).Reason)
	}
	labels := strings.Split(mesh, ".")
	if len(labels) < 2 {
		return fail("mesh part must be a fully qualified domain name (two or more labels)")
	}
	for _, l := range labels {
		if reason := checkLabel(l); reason != "" {
			return fail("mesh part: " + reason)
		}
	}
	return checkDisplay(s, Target{Kind: TargetCrossMesh, Addr: a, Mesh: mesh})
}
