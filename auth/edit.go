package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The refusals of AddPrincipal and RemovePrincipal.
var (
	ErrPrincipalExists = errors.New("auth: a principal of that name exists")
	ErrNoPrincipal     = errors.New("auth: no principal of that name")
	// ErrBadPrincipal: the entry to add is invalid (its name, node
	// patterns or permission patterns); the message names the field.
	ErrBadPrincipal = errors.New("auth: invalid principal")
)

// editFile is the principals file as edit sees it: every entry kept as
// written (re-indented), so an entry that predates the state lists keeps
// the default Load gives it instead of being rewritten with empty ones.
type editFile struct {
	Principals []json.RawMessage `json:"principals"`
}

// AddPrincipal adds p to the principals file at path and returns the
// credential of its new secret (p.SecretHash is set from it; p must not
// carry a PublicKey). The file is read, checked, changed and written back
// atomically (temp file, fsync, rename; mode 0600), and the result is
// validated as Load would before anything is written. Nothing is escaped
// for HTML: a pattern reads ">" in the file, not "\u003e".
//
// Concurrent edits of one file are not coordinated: the last rename wins.
func AddPrincipal(path string, p Principal) (Credential, error) {
	secret, hash, err := NewSecret()
	if err != nil {
		return Credential{}, err
	}
	p.SecretHash = hash
	if err := addEntry(path, p); err != nil {
		return Credential{}, err
	}
	return Credential{Principal: p.Name, Secret: secret}, nil
}

// addEntry validates p and appends it to the file at path.
func addEntry(path string, p Principal) error {
	if _, err := newEntry(p); err != nil {
		return fmt.Errorf("%w %q: %v", ErrBadPrincipal, p.Name, err)
	}
	entry, err := marshalNoEscape(p)
	if err != nil {
		return err
	}
	return editPrincipals(path, func(names []string, f *editFile) error {
		if slices.Contains(names, p.Name) {
			return fmt.Errorf("%w: %q", ErrPrincipalExists, p.Name)
		}
		f.Principals = append(f.Principals, entry)
		return nil
	})
}

// RemovePrincipal removes the principal name from the file at path, as
// AddPrincipal writes it.
func RemovePrincipal(path, name string) error {
	return editPrincipals(path, func(names []string, f *editFile) error {
		i := slices.Index(names, name)
		if i < 0 {
			return fmt.Errorf("%w: %q", ErrNoPrincipal, name)
		}
		f.Principals = slices.Delete(f.Principals, i, i+1)
		return nil
	})
}

// ListPrincipals returns the principals of the file at path, validated as
// Load does, with the state defaults Load applies.
func ListPrincipals(path string) ([]Principal, error) {
	t, err := loadTable(path)
	if err != nil {
		return nil, err
	}
	out := make([]Principal, 0, len(t.byName))
	for _, e := range t.byName {
		out = append(out, e.p)
	}
	slices.SortFunc(out, func(a, b Principal) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// editPrincipals reads the file at path (as Load does: not readable by
// others, valid), lets change edit its entries, validates the result and
// writes it atomically.
func editPrincipals(path string, change func(names []string, f *editFile) error) error {
	data, err := readSecureFile(path)
	if err != nil {
		return err
	}
	if _, err := parseTable(path, data); err != nil {
		return err
	}
	var f editFile
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("auth: %s: %w", path, err)
	}
	names := make([]string, len(f.Principals))
	for i, raw := range f.Principals {
		var n struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			return fmt.Errorf("auth: %s: principal %d: %w", path, i, err)
		}
		names[i] = n.Name
	}
	if err := change(names, &f); err != nil {
		return err
	}
	for i, raw := range f.Principals {
		// Re-encoded without HTML escaping: an older busbar wrote ">" as
		// "\u003e". Keys come out sorted; absent fields stay absent.
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("auth: %s: principal %d: %w", path, i, err)
		}
		if f.Principals[i], err = marshalNoEscape(v); err != nil {
			return err
		}
	}
	out, err := marshalNoEscape(f)
	if err != nil {
		return err
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, out, "", "  "); err != nil {
		return err
	}
	indented.WriteByte('\n')
	if _, err := parseTable(path, indented.Bytes()); err != nil {
		return err
	}
	return writeFileAtomic(path, indented.Bytes())
}

// marshalNoEscape is json.Marshal without HTML escaping, so ">" and "&"
// stay as they are in a file people read and edit.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// indentNoEscape is marshalNoEscape, indented by two spaces, with a final
// newline: how busbar writes the JSON files people read.
func indentNoEscape(v any) ([]byte, error) {
	raw, err := marshalNoEscape(v)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}
