package seal

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"slices"
)

// A Member is one device of a group: its keys and a label for people.
type Member struct {
	Public Public
	Label  string
}

// ID returns the member's device id.
func (m Member) ID() DeviceID { return m.Public.ID() }

// A Manifest describes a group: its name, an epoch that grows with every
// change, its members (1 to MaxGroupMembers devices, all equal: any
// member may invite, remove or leave), and the member that signed it. A
// Manifest is immutable; changes make a new one (Add, Remove, Next).
//
// Encoding, canonical so that a signature is stable (docs/durable.md,
// "The group manifest"):
//
//	magic "BBGM" (4) | format 1 (1) | name length (1) | name | epoch, uint64 BE (8)
//	| member count (1) | members, by ascending device id:
//	    Public (1249) | label length (1) | label
//	| signer device id (20) | Ed25519 signature (64)
//
// The signature covers manifestDomain and every byte before it.
// ParseManifest checks the form only; trust comes from Verify (against the
// previous manifest) or VerifyInvited (against an invitation token).
type Manifest struct {
	name    string
	epoch   uint64
	members []Member // sorted by device id
	signer  DeviceID
	raw     []byte // the encoding, signature included
}

const (
	manifestMagic  = "BBGM"
	manifestFormat = 1
	manifestDomain = "busbar group manifest\x00"
	// manifestFixed is a manifest without its name and members.
	manifestFixed = 4 + 1 + 1 + 8 + 1 + DeviceIDSize + ed25519.SignatureSize
)

// NewGroup starts a group: epoch 1, the creator its only member, signed
// by the creator.
func NewGroup(creator *Identity, name, label string) (*Manifest, error) {
	return build(creator, name, 1, []Member{{Public: creator.Public(), Label: label}})
}

// Next makes the manifest that follows m: epoch m.Epoch()+1, the given
// members, signed by author, who must be a member of m.
func (m *Manifest) Next(author *Identity, members []Member) (*Manifest, error) {
	if !m.Has(author.ID()) {
		return nil, fmt.Errorf("%w: author %s of group %q", ErrNotMember, author.ID(), m.name)
	}
	if m.epoch == ^uint64(0) {
		return nil, fmt.Errorf("seal: group %q: epoch exhausted", m.name)
	}
	return build(author, m.name, m.epoch+1, members)
}

// Add makes the next manifest with p added under label, signed by author.
func (m *Manifest) Add(author *Identity, p Public, label string) (*Manifest, error) {
	if m.Has(p.ID()) {
		return nil, fmt.Errorf("%w: %s in group %q", ErrAlreadyMember, p.ID(), m.name)
	}
	return m.Next(author, append(m.Members(), Member{Public: p, Label: label}))
}

// Remove makes the next manifest without the given devices, signed by
// author. An author that removes itself leaves the group.
func (m *Manifest) Remove(author *Identity, ids ...DeviceID) (*Manifest, error) {
	members := m.Members()
	for _, id := range ids {
		i := slices.IndexFunc(members, func(x Member) bool { return x.ID() == id })
		if i < 0 {
			return nil, fmt.Errorf("%w: %s in group %q", ErrNotMember, id, m.name)
		}
		members = slices.Delete(members, i, i+1)
	}
	return m.Next(author, members)
}

// build validates, sorts, encodes and signs a manifest.
func build(author *Identity, name string, epoch uint64, members []Member) (*Manifest, error) {
	if !ValidGroupName(name) {
		return nil, fmt.Errorf("seal: invalid group name %q", clip(name))
	}
	switch {
	case len(members) == 0:
		return nil, fmt.Errorf("seal: group %q: a manifest lists at least one member", name)
	case len(members) > MaxGroupMembers:
		return nil, fmt.Errorf("%w: group %q: %d members, at most %d", ErrTooManyMembers, name, len(members), MaxGroupMembers)
	}
	members = slices.Clone(members)
	slices.SortFunc(members, func(a, b Member) int { return bytes.Compare(a.Public.id[:], b.Public.id[:]) })
	for i, x := range members {
		if x.Public.IsZero() {
			return nil, fmt.Errorf("seal: group %q: a member has no keys", name)
		}
		if !ValidLabel(x.Label) {
			return nil, fmt.Errorf("seal: group %q: invalid label %q", name, clip(x.Label))
		}
		if i > 0 && members[i-1].ID() == x.ID() {
			return nil, fmt.Errorf("seal: group %q: %s listed twice", name, x.ID())
		}
	}
	m := &Manifest{name: name, epoch: epoch, members: members, signer: author.ID()}
	buf := make([]byte, 0, len(manifestDomain)+m.size())
	buf = append(buf, manifestDomain...)
	buf = m.appendBody(buf)
	buf = append(buf, ed25519.Sign(author.sign, buf)...)
	m.raw = buf[len(manifestDomain):]
	return m, nil
}

func (m *Manifest) size() int {
	n := manifestFixed + len(m.name)
	for _, x := range m.members {
		n += PublicSize + 1 + len(x.Label)
	}
	return n
}

// appendBody appends everything the signature covers but its domain.
func (m *Manifest) appendBody(b []byte) []byte {
	b = append(b, manifestMagic...)
	b = append(b, manifestFormat)
	b = putShort(b, m.name)
	b = binary.BigEndian.AppendUint64(b, m.epoch)
	b = append(b, byte(len(m.members)))
	for _, x := range m.members {
		b = append(b, x.Public.raw...)
		b = putShort(b, x.Label)
	}
	return append(b, m.signer[:]...)
}

// ParseManifest strictly decodes a manifest: the magic and format, every
// length within its limit, members in ascending order without duplicates,
// valid keys, names and labels, no trailing bytes. It does not check the
// signature: call Verify or VerifyInvited before trusting the result.
func ParseManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifestBytes {
		return nil, malformed("manifest of %d bytes, at most %d", len(b), MaxManifestBytes)
	}
	r := reader{b: b, what: "manifest"}
	if string(r.take(4, "magic")) != manifestMagic && r.err == nil {
		r.fail(malformed("manifest: bad magic"))
	}
	if f := r.u8("format"); r.err == nil && f != manifestFormat {
		r.fail(malformed("manifest: format %d, this build reads %d", f, manifestFormat))
	}
	m := &Manifest{}
	m.name = string(r.short(MaxGroupNameLen, "name"))
	m.epoch = r.u64("epoch")
	n := int(r.u8("member count"))
	switch {
	case r.err != nil:
	case n == 0:
		r.fail(malformed("manifest lists no members"))
	case n > MaxGroupMembers:
		r.fail(fmt.Errorf("%w: manifest lists %d members, at most %d (%w)", ErrMalformed, n, MaxGroupMembers, ErrTooManyMembers))
	}
	for i := 0; i < n && r.err == nil; i++ {
		raw := r.take(PublicSize, "member key")
		label := string(r.short(MaxLabelLen, "label"))
		if r.err != nil {
			break
		}
		p, err := ParsePublic(raw)
		if err != nil {
			r.fail(err)
			break
		}
		if i > 0 && bytes.Compare(m.members[i-1].Public.id[:], p.id[:]) >= 0 {
			r.fail(malformed("manifest: members not in ascending order of device id, or listed twice"))
		}
		if !ValidLabel(label) {
			r.fail(malformed("manifest: invalid label %q", clip(label)))
		}
		m.members = append(m.members, Member{Public: p, Label: label})
	}
	copy(m.signer[:], r.take(DeviceIDSize, "signer"))
	r.take(ed25519.SignatureSize, "signature")
	if err := r.end(); err != nil {
		return nil, err
	}
	switch {
	case !ValidGroupName(m.name):
		return nil, malformed("manifest: invalid group name %q", clip(m.name))
	case m.epoch == 0:
		return nil, malformed("manifest: epoch 0")
	}
	m.raw = bytes.Clone(b)
	return m, nil
}

// Bytes returns the encoding, signature included.
func (m *Manifest) Bytes() []byte { return bytes.Clone(m.raw) }

// Name returns the group name.
func (m *Manifest) Name() string { return m.name }

// Epoch returns the epoch: 1 for a new group, one more for every change.
func (m *Manifest) Epoch() uint64 { return m.epoch }

// Signer returns the device id of the member that signed the manifest.
func (m *Manifest) Signer() DeviceID { return m.signer }

// Members returns a copy of the members, by ascending device id.
func (m *Manifest) Members() []Member { return slices.Clone(m.members) }

// Len returns the number of members.
func (m *Manifest) Len() int { return len(m.members) }

// Member returns the member with device id id.
func (m *Manifest) Member(id DeviceID) (Member, bool) {
	i, ok := slices.BinarySearchFunc(m.members, id, func(x Member, id DeviceID) int {
		return bytes.Compare(x.Public.id[:], id[:])
	})
	if !ok {
		return Member{}, false
	}
	return m.members[i], true
}

// Has reports whether id is a member.
func (m *Manifest) Has(id DeviceID) bool {
	_, ok := m.Member(id)
	return ok
}

// SenderKey implements Senders: the key of id if it is a member of this
// group.
func (m *Manifest) SenderKey(group string, id DeviceID) (Public, bool) {
	if group != m.name {
		return Public{}, false
	}
	x, ok := m.Member(id)
	return x.Public, ok
}

// Recipients returns the keys to seal a message to: every member but
// self. A device removed from the group is not in the manifest, so
// nothing sent after its removal is sealed to it.
func (m *Manifest) Recipients(self DeviceID) []Public {
	out := make([]Public, 0, len(m.members))
	for _, x := range m.members {
		if x.ID() != self {
			out = append(out, x.Public)
		}
	}
	return out
}

// Diff returns the devices m has that prev lacks, and those prev has that
// m lacks, each by ascending id. A nil prev has no members.
func (m *Manifest) Diff(prev *Manifest) (added, removed []DeviceID) {
	for _, x := range m.members {
		if prev == nil || !prev.Has(x.ID()) {
			added = append(added, x.ID())
		}
	}
	if prev != nil {
		for _, x := range prev.members {
			if !m.Has(x.ID()) {
				removed = append(removed, x.ID())
			}
		}
	}
	return added, removed
}

// Verify decides whether m may follow prev, the manifest this device
// holds for the group. It accepts m only if
//
//   - with prev nil: m is a new group, epoch 1, signed by its only member;
//   - otherwise: m names prev's group, its epoch is above prev's
//     (ErrStaleManifest: a replay, which changes nothing), and its signer
//     is a member of prev (ErrUnauthorizedSigner) —
//
// and the signature verifies with the signer's key (ErrBadSignature).
// Limits hold for every Manifest value: ParseManifest and the
// constructors enforce them.
func (m *Manifest) Verify(prev *Manifest) error {
	var key Public
	if prev == nil {
		if m.epoch != 1 || len(m.members) != 1 || m.members[0].ID() != m.signer {
			return fmt.Errorf("%w: a group starts at epoch 1 with its creator, who signs it (group %q, epoch %d, %d members)",
				ErrUnauthorizedSigner, m.name, m.epoch, len(m.members))
		}
		key = m.members[0].Public
	} else {
		if m.name != prev.name {
			return fmt.Errorf("%w: manifest of %q follows %q", ErrWrongGroup, m.name, prev.name)
		}
		if m.epoch <= prev.epoch {
			return fmt.Errorf("%w: group %q epoch %d, holding %d", ErrStaleManifest, m.name, m.epoch, prev.epoch)
		}
		x, ok := prev.Member(m.signer)
		if !ok {
			return fmt.Errorf("%w: %s is not a member of group %q at epoch %d", ErrUnauthorizedSigner, m.signer, m.name, prev.epoch)
		}
		key = x.Public
	}
	return m.verifySignature(key)
}

// VerifyInvited decides whether a device that joined with token t and
// holds no manifest yet may accept m as its first: m names t's group, is
// signed by t's inviter with the key the token carries, lists the
// inviter and lists me.
func (m *Manifest) VerifyInvited(t *Token, me DeviceID) error {
	if m.name != t.group {
		return fmt.Errorf("%w: manifest of %q, invited to %q", ErrWrongGroup, m.name, t.group)
	}
	x, ok := m.Member(m.signer)
	if m.signer != t.inviter.ID() || !ok || !x.Public.Equal(t.inviter) {
		return fmt.Errorf("%w: manifest signed by %s, invited by %s", ErrUnauthorizedSigner, m.signer, t.inviter.ID())
	}
	if !m.Has(me) {
		return fmt.Errorf("%w: %s is not in group %q at epoch %d", ErrNotMember, me, m.name, m.epoch)
	}
	return m.verifySignature(t.inviter)
}

func (m *Manifest) verifySignature(key Public) error {
	body := len(m.raw) - ed25519.SignatureSize
	signed := make([]byte, 0, len(manifestDomain)+body)
	signed = append(append(signed, manifestDomain...), m.raw[:body]...)
	if !ed25519.Verify(key.sign, signed, m.raw[body:]) {
		return fmt.Errorf("%w: manifest of group %q epoch %d", ErrBadSignature, m.name, m.epoch)
	}
	return nil
}
