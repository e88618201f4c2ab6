package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
)

// Store holds a validated set of principals. It is safe for concurrent use;
// Reload replaces the whole set atomically, so an Authenticate call sees
// either the old set or the new one, never a mix. The zero Store is empty
// and authenticates no one.
type Store struct {
	cur atomic.Pointer[table]
}

type table struct {
	byName  map[string]*entry
	byKeyID map[string]*entry // MoonBridge key ids
	notes   []string          // what Load decided for the operator; see Store.Notes
}

// principalsFile is the on-disk format of PrincipalsFile.
type principalsFile struct {
	Principals []Principal `json:"principals"`
}

// Load reads and validates a principals file (see the package doc for the
// format). The file must not be accessible by group or others (error wraps
// ErrInsecureFile); unknown JSON fields, duplicate names, bad patterns and
// bad proof fields are errors naming the principal and field.
//
// A principal whose permissions name none of state_read, state_write and
// state_admin was written before those lists existed, when every
// principal could use all replicated state. It gets a default, which
// Notes reports: every namespace for all three if it may use every
// channel (each channel list holds ">", as Bootstrap's "local" does), so
// a bus set up by an earlier release keeps working; no state at all
// otherwise, so a principal restricted to some channels is not left with
// every namespace. A list present in the file, even empty or null, is
// taken as written. NewStore applies no default: nil there allows nothing.
func Load(path string) (*Store, error) {
	t, err := loadTable(path)
	if err != nil {
		return nil, err
	}
	s := &Store{}
	s.cur.Store(t)
	return s, nil
}

// NewStore builds a Store from ps with the same validation as Load. The
// Store keeps deep copies, so later changes to ps have no effect.
func NewStore(ps []Principal) (*Store, error) {
	t, err := newTable(ps)
	if err != nil {
		return nil, err
	}
	s := &Store{}
	s.cur.Store(t)
	return s, nil
}

// Reload loads path and, only if it is entirely valid, swaps it in. On
// error the current principals stay in force.
func (s *Store) Reload(path string) error {
	t, err := loadTable(path)
	if err != nil {
		return err
	}
	s.cur.Store(t)
	return nil
}

func loadTable(path string) (*table, error) {
	data, err := readSecureFile(path)
	if err != nil {
		return nil, err
	}
	return parseTable(path, data)
}

// parseTable validates the content of the principals file path as Load
// does.
func parseTable(path string, data []byte) (*table, error) {
	var f principalsFile
	if err := decodeStrict(data, &f); err != nil {
		return nil, fmt.Errorf("auth: %s: %w", path, err)
	}
	notes, err := defaultState(data, f.Principals)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", path, err)
	}
	t, err := newTable(f.Principals)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.notes = notes
	return t, nil
}

// stateFields are the JSON names of the state lists in Permissions.
var stateFields = []string{"state_read", "state_write", "state_admin"}

// defaultState gives each principal of a file whose permissions name no
// state list the default Load documents, and returns a note per such
// principal. data is the file ps was decoded from.
func defaultState(data []byte, ps []Principal) ([]string, error) {
	var raw struct {
		Principals []struct {
			Permissions map[string]json.RawMessage `json:"permissions"`
		} `json:"principals"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	if len(raw.Principals) != len(ps) { // cannot happen: the same bytes decoded
		return nil, errors.New("principals changed between two decodings")
	}
	var notes []string
	for i := range ps {
		if namesStateList(raw.Principals[i].Permissions) {
			continue
		}
		p := &ps[i].Permissions
		if p.allChannels() {
			all := AllPermissions()
			p.StateRead, p.StateWrite, p.StateAdmin = all.StateRead, all.StateWrite, all.StateAdmin
			notes = append(notes, fmt.Sprintf("principal %q names no state permissions (its entry predates them) and may use every channel, so it may read, write and administer every namespace, as before; add state_read, state_write and state_admin to say so", clip(ps[i].Name)))
			continue
		}
		notes = append(notes, fmt.Sprintf("principal %q names no state permissions (its entry predates them), so it may not use replicated state; add state_read, state_write or state_admin to grant some", clip(ps[i].Name)))
	}
	return notes, nil
}

// namesStateList reports whether a principal's permissions object names
// a state list. encoding/json matches field names without regard to case,
// so this must too: "State_Read" is a list the file sets.
func namesStateList(perms map[string]json.RawMessage) bool {
	for k := range perms {
		for _, f := range stateFields {
			if strings.EqualFold(k, f) {
				return true
			}
		}
	}
	return false
}

// Notes returns what the last Load or Reload decided that an operator
// should hear about: one line per principal given a default because its
// entry predates the state permissions (see Load). Log them at startup.
func (s *Store) Notes() []string {
	t := s.cur.Load()
	if t == nil {
		return nil
	}
	return slices.Clone(t.notes)
}

// decodeStrict decodes one JSON value into v, refusing unknown fields (a
// typo like "nodse" must not silently drop a restriction) and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func newTable(ps []Principal) (*table, error) {
	t := &table{byName: make(map[string]*entry, len(ps)), byKeyID: map[string]*entry{}}
	for i, p := range ps {
		e, err := newEntry(p)
		if err != nil {
			return nil, fmt.Errorf("auth: principals[%d] %q: %w", i, clip(p.Name), err)
		}
		if _, dup := t.byName[p.Name]; dup {
			return nil, fmt.Errorf("auth: principals[%d] %q: duplicate name", i, p.Name)
		}
		t.byName[p.Name] = e
		if k := p.MoonBridge; k != nil {
			if _, dup := t.byKeyID[k.KeyID]; dup {
				return nil, fmt.Errorf("auth: principals[%d] %q: moonbridge key_id %q is another principal's", i, p.Name, k.KeyID)
			}
			t.byKeyID[k.KeyID] = e
		}
	}
	return t, nil
}

// dummyHash is compared against when the principal is unknown, so that case
// costs about the same as a wrong secret (best effort against timing probes).
var dummyHash = sha256.Sum256([]byte("busbar: no such principal"))

// Authenticate checks credential c for a connection that wants to be node
// node, answering a hello whose server nonce was nonce. It returns a copy of
// the principal, or:
//   - an error wrapping ErrBadNodeName if node is not a valid name (checked
//     first; it reveals nothing about principals);
//   - an error wrapping ErrBadCredentials, with the fixed text
//     "auth: bad credentials", for unknown principal, wrong secret or bad
//     signature alike; Reason(err) gives the detail for server logs;
//   - an error wrapping ErrNodeNotAllowed, naming the node, if the
//     credentials are good but the principal may not claim node.
func (s *Store) Authenticate(c Credential, node string, nonce []byte) (*Principal, error) {
	if err := ValidNodeName(node); err != nil {
		return nil, err
	}
	t := s.cur.Load()
	var e *entry
	if t != nil {
		e = t.byName[c.Principal]
	}
	if e == nil {
		h := sha256.Sum256([]byte(c.Secret))
		subtle.ConstantTimeCompare(h[:], dummyHash[:])
		return nil, badCredentials(fmt.Sprintf("unknown principal %q", clip(c.Principal)))
	}
	if e.p.MoonBridge != nil {
		return nil, badCredentials(fmt.Sprintf("principal %q is a MoonBridge key: it connects through busbar serve --moonbridge", e.p.Name))
	}
	if e.hasKey {
		switch {
		case c.Secret != "":
			return nil, badCredentials(fmt.Sprintf("principal %q uses a public key but presented a secret", e.p.Name))
		case len(nonce) == 0:
			// Without a fresh nonce a signature could be replayed; this is
			// a server bug, but failing closed is the safe answer.
			return nil, badCredentials("empty nonce: the server must supply a fresh one")
		case len(c.Signature) != ed25519.SignatureSize:
			return nil, badCredentials(fmt.Sprintf("principal %q: signature missing or wrong length (%d)", e.p.Name, len(c.Signature)))
		case !ed25519.Verify(e.pub, SignedMessage(nonce, node), c.Signature):
			return nil, badCredentials(fmt.Sprintf("principal %q: signature does not verify for this nonce and node", e.p.Name))
		}
	} else {
		if len(c.Signature) != 0 {
			return nil, badCredentials(fmt.Sprintf("principal %q uses a secret but presented a signature", e.p.Name))
		}
		h := sha256.Sum256([]byte(c.Secret))
		if subtle.ConstantTimeCompare(h[:], e.hash[:]) != 1 {
			return nil, badCredentials(fmt.Sprintf("principal %q: wrong secret", e.p.Name))
		}
	}
	if !e.mayUseNode(node) {
		return nil, fmt.Errorf("%w: principal %q may not claim node %q", ErrNodeNotAllowed, e.p.Name, node)
	}
	p := e.p.clone()
	return &p, nil
}
