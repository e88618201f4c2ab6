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
	byName map[string]*entry
}

// principalsFile is the on-disk format of PrincipalsFile.
type principalsFile struct {
	Principals []Principal `json:"principals"`
}

// Load reads and validates a principals file (see the package doc for the
// format). The file must not be accessible by group or others (error wraps
// ErrInsecureFile); unknown JSON fields, duplicate names, bad patterns and
// bad proof fields are errors naming the principal and field.
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
	var f principalsFile
	if err := decodeStrict(data, &f); err != nil {
		return nil, fmt.Errorf("auth: %s: %w", path, err)
	}
	t, err := newTable(f.Principals)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
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
	t := &table{byName: make(map[string]*entry, len(ps))}
	for i, p := range ps {
		e, err := newEntry(p)
		if err != nil {
			return nil, fmt.Errorf("auth: principals[%d] %q: %w", i, clip(p.Name), err)
		}
		if _, dup := t.byName[p.Name]; dup {
			return nil, fmt.Errorf("auth: principals[%d] %q: duplicate name", i, p.Name)
		}
		t.byName[p.Name] = e
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
