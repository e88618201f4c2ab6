package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"busbar/seal"

	bolt "go.etcd.io/bbolt"
)

// groupsDir holds one file per group, named by the group: the current
// signed manifest, as seal.Manifest.Bytes.
const groupsDir = "groups"

func (d *Device) groupPath(name string) string { return filepath.Join(d.dir, groupsDir, name) }

// readGroup returns the manifest held for name, or nil if none. The name
// must be valid (it becomes a file name).
func (d *Device) readGroup(name string) (*seal.Manifest, error) {
	if !seal.ValidGroupName(name) {
		return nil, fmt.Errorf("durable: %q is not a group name", name)
	}
	b, err := os.ReadFile(d.groupPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m, err := seal.ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("durable: group file %s: %w", d.groupPath(name), err)
	}
	return m, nil
}

// writeGroup replaces the group's file: a temporary file, synced, renamed
// over the old one, and the directory synced. Callers hold device.db's
// lock (they run inside update), so two processes never interleave a
// read and a write of one group.
func (d *Device) writeGroup(m *seal.Manifest) error {
	dir := filepath.Join(d.dir, groupsDir)
	f, err := os.CreateTemp(dir, ".tmp-"+m.Name()+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(m.Bytes())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, d.groupPath(m.Name()))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("durable: writing group %s: %w", m.Name(), err)
	}
	if dd, err := os.Open(dir); err == nil {
		err = dd.Sync()
		dd.Close()
		return err
	}
	return nil
}

// Group returns the manifest this device holds for name, or nil.
func (d *Device) Group(name string) (*seal.Manifest, error) { return d.readGroup(name) }

// Groups returns the names of the groups this device holds, sorted.
func (d *Device) Groups() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(d.dir, groupsDir))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && seal.ValidGroupName(e.Name()) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// CreateGroup starts a group with this device its only member.
func (d *Device) CreateGroup(name, label string) (*seal.Manifest, error) {
	m, err := seal.NewGroup(d.me, name, label)
	if err != nil {
		return nil, err
	}
	return m, d.UpdateGroup(m)
}

// UpdateGroup replaces the group's manifest with m if m may follow the one
// held (seal.Manifest.Verify; with none held, m must be a new group).
func (d *Device) UpdateGroup(m *seal.Manifest) error {
	return d.update(func(tx *bolt.Tx) error {
		prev, err := d.readGroup(m.Name())
		if err != nil {
			return err
		}
		if err := m.Verify(prev); err != nil {
			return err
		}
		return d.setGroup(tx, m)
	})
}

// InstallGroup holds m for its group without checking it against the
// manifest held: trust given out of band (a test, or an administrator who
// copied the file); devices join with Invite and Join. m must list
// this device.
func (d *Device) InstallGroup(m *seal.Manifest) error {
	if !m.Has(d.ID()) {
		return &ErrNotMember{Group: m.Name(), Status: StatusRemoved}
	}
	return d.update(func(tx *bolt.Tx) error { return d.setGroup(tx, m) })
}
