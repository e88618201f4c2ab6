package seal

import "fmt"

// ApplyControl applies an opened membership message (GroupManifest, Leave
// or Revoke) to current, the manifest this device holds for the message's
// group, and returns the manifest to hold next. Its body is the new
// manifest, which must
//
//   - name the message's group (ErrWrongGroup),
//   - be signed by the message's sender (ErrUnauthorizedSigner),
//   - follow current (Manifest.Verify: a newer epoch, signed by a member),
//   - for Leave, remove exactly the sender and add no one; for Revoke,
//     remove at least one device, not the sender, and add no one
//     (ErrBadChange).
//
// A replay gets ErrStaleManifest and changes nothing. A device that finds
// itself missing from the result was removed. A device that holds no
// manifest for the group (current nil) is not a member: ErrNotMember; a
// joiner's first manifest goes through ApplyInvited.
func ApplyControl(current *Manifest, msg Inner) (*Manifest, error) {
	if current == nil {
		return nil, fmt.Errorf("%w: no manifest held for group %q", ErrNotMember, msg.Group)
	}
	next, err := controlManifest(msg)
	if err != nil {
		return nil, err
	}
	if err := next.Verify(current); err != nil {
		return nil, err
	}
	added, removed := next.Diff(current)
	switch msg.Kind {
	case KindLeave:
		if len(added) != 0 || len(removed) != 1 || removed[0] != msg.Sender {
			return nil, fmt.Errorf("%w: leave from %s adds %d and removes %d devices", ErrBadChange, msg.Sender, len(added), len(removed))
		}
	case KindRevoke:
		if len(added) != 0 || len(removed) == 0 || !next.Has(msg.Sender) {
			return nil, fmt.Errorf("%w: revoke from %s must remove others and add no one (adds %d, removes %d)",
				ErrBadChange, msg.Sender, len(added), len(removed))
		}
	}
	return next, nil
}

// ApplyInvited is how a device that joined with token t accepts its first
// manifest: a GroupManifest message from the inviter whose manifest
// passes Manifest.VerifyInvited for me. Open the message with t as the
// Senders.
func ApplyInvited(t *Token, me DeviceID, msg Inner) (*Manifest, error) {
	if msg.Kind != KindGroupManifest {
		return nil, fmt.Errorf("seal: %s message cannot admit a joiner", msg.Kind)
	}
	next, err := controlManifest(msg)
	if err != nil {
		return nil, err
	}
	if err := next.VerifyInvited(t, me); err != nil {
		return nil, err
	}
	return next, nil
}

// controlManifest decodes a membership message's manifest and checks it
// against the message.
func controlManifest(msg Inner) (*Manifest, error) {
	switch msg.Kind {
	case KindGroupManifest, KindLeave, KindRevoke:
	default:
		return nil, fmt.Errorf("seal: %s message carries no manifest", msg.Kind)
	}
	m, err := ParseManifest(msg.Body)
	if err != nil {
		return nil, err
	}
	if m.name != msg.Group {
		return nil, fmt.Errorf("%w: %s message for %q carries the manifest of %q", ErrWrongGroup, msg.Kind, msg.Group, m.name)
	}
	if m.signer != msg.Sender {
		return nil, fmt.Errorf("%w: %s message from %s carries a manifest signed by %s", ErrUnauthorizedSigner, msg.Kind, msg.Sender, m.signer)
	}
	return m, nil
}
