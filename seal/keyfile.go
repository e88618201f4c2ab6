package seal

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"busbar/internal/ownerperm"
)

// KeyFile is the name of the identity's file in the device's directory.
//
// Its 89 bytes:
//
//	magic "BBDK" (4) | format 1 (1) | Ed25519 seed (32) | MLKEM768-X25519 seed (32) | device id (20)
//
// The device id is derived again on loading and compared, so a damaged
// file is refused rather than loaded as another device.
const KeyFile = "device.key"

const (
	keyFileMagic  = "BBDK"
	keyFileFormat = 1
	keyFileSize   = 4 + 1 + ed25519.SeedSize + kemSeedSize + DeviceIDSize
	keyFileMode   = 0o600
)

// Save writes the identity to KeyFile in dir, creating dir with mode 0700
// if it is missing. The file is written with mode 0600 under a temporary
// name, synced, and linked into place, so it appears complete or not at
// all. Save never replaces a key file (ErrKeyExists): a device that lost
// its key is a new device. It refuses a directory that group or others
// may write (ErrInsecureKeyFile), since they could swap the file.
func (id *Identity) Save(dir string) (err error) {
	if err := ownerperm.MkdirAll(dir); err != nil { // 0700, or owner-only ACL
		return fmt.Errorf("seal: key directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("seal: key directory: %w", err)
	}
	if why := ownerperm.Exposed(dir, fi, 0o022, false); why != "" {
		return fmt.Errorf("%w: directory %s has %s, group or others may write it (%s)",
			ErrInsecureKeyFile, dir, why, ownerperm.Fix(dir, true))
	}
	path := filepath.Join(dir, KeyFile)
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%w: %s", ErrKeyExists, path)
	}
	f, err := os.CreateTemp(dir, "."+KeyFile+".tmp-*") // created 0600
	if err != nil {
		return fmt.Errorf("seal: key file: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := writeSynced(f, id.keyFileBytes()); err != nil {
		return fmt.Errorf("seal: key file: %w", err)
	}
	// A hard link fails if path exists, where a rename would replace it.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s", ErrKeyExists, path)
		}
		return fmt.Errorf("seal: key file: %w", err)
	}
	syncDir(dir)
	return nil
}

func writeSynced(f *os.File, data []byte) error {
	err := f.Chmod(keyFileMode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir makes a new directory entry durable. Best effort: not every
// platform can sync a directory, and the file itself is synced.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

func (id *Identity) keyFileBytes() []byte {
	b := make([]byte, 0, keyFileSize)
	b = append(b, keyFileMagic...)
	b = append(b, keyFileFormat)
	b = append(b, id.sign.Seed()...)
	b = append(b, id.kemSeed...)
	return append(b, id.pub.id[:]...)
}

// Load reads the identity that Save wrote to dir. It refuses a key file
// that group or others may read or write (ErrInsecureKeyFile, with the
// chmod that fixes it), checking the mode on the open file so it cannot
// be swapped between check and read, and a damaged one (ErrMalformed).
func Load(dir string) (*Identity, error) {
	path := filepath.Join(dir, KeyFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("seal: key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("seal: key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("seal: key file %s is not a regular file", path)
	}
	if why := ownerperm.Exposed(path, fi, 0o077, false); why != "" {
		return nil, fmt.Errorf("%w: %s has %s, want it private (%s)",
			ErrInsecureKeyFile, path, why, ownerperm.Fix(path, false))
	}
	data, err := io.ReadAll(io.LimitReader(f, keyFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("seal: key file: %w", err)
	}
	return parseKeyFile(path, data)
}

func parseKeyFile(path string, data []byte) (*Identity, error) {
	if len(data) != keyFileSize || string(data[:4]) != keyFileMagic {
		return nil, malformed("key file %s is not a busbar device key (%d bytes)", path, len(data))
	}
	if data[4] != keyFileFormat {
		return nil, malformed("key file %s has format %d, this build reads %d", path, data[4], keyFileFormat)
	}
	signSeed := data[5 : 5+ed25519.SeedSize]
	kemSeed := data[5+ed25519.SeedSize : 5+ed25519.SeedSize+kemSeedSize]
	id, err := newIdentity(signSeed, kemSeed)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(id.pub.id[:], data[keyFileSize-DeviceIDSize:]) {
		return nil, malformed("key file %s is damaged: its keys do not match its device id", path)
	}
	return id, nil
}
