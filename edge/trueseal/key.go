package trueseal

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/flynn/noise"

	"busbar/internal/ownerperm"
)

// KeyFile is the relay's static key in the data directory: the X25519
// private key as 64 hex digits and a newline, the format of
// trueseal-relay's keypair.hex (so a relay's existing key can be brought
// over and its clients stay configured). Mode 0600; a file others can
// read is refused.
const KeyFile = "trueseal.key"

// maxKeyFile bounds what is read of a key file.
const maxKeyFile = 4096

// Key file errors.
var (
	ErrInsecureKey = errors.New("trueseal: the key file is readable by other users")
	ErrKeyFile     = errors.New("trueseal: the key file does not hold an X25519 private key in hex")
)

// PublicKeyText is how a trueseal client is configured with the relay's
// key: 64 lowercase hex digits.
func PublicKeyText(pub []byte) string { return hex.EncodeToString(pub) }

// KeyPath is the key file's path in data directory dir.
func KeyPath(dir string) string { return filepath.Join(dir, KeyFile) }

// LoadKey reads the relay's static key from dir; a missing file is an
// error satisfying errors.Is(err, fs.ErrNotExist).
func LoadKey(dir string) (noise.DHKey, error) { return LoadKeyFile(KeyPath(dir)) }

// LoadKeyFile reads the relay's static key from the key file at path (the
// format of KeyFile): on a bus, the one file every broker with a trueseal
// listener is given, so a client configured with its public key may use
// any of them (docs/trueseal.md#on-a-bus).
func LoadKeyFile(path string) (noise.DHKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return noise.DHKey{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return noise.DHKey{}, err
	}
	if why := ownerperm.Exposed(path, fi, 0o077, false); why != "" {
		return noise.DHKey{}, fmt.Errorf("%w: %s has %s (%s)", ErrInsecureKey, path, why, ownerperm.Fix(path, false))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile))
	if err != nil {
		return noise.DHKey{}, err
	}
	k, err := keyFromHex(bytes.TrimSpace(data))
	if err != nil {
		return noise.DHKey{}, fmt.Errorf("%w: %s", ErrKeyFile, path)
	}
	return k, nil
}

func keyFromHex(h []byte) (noise.DHKey, error) {
	priv := make([]byte, KeyBytes)
	if len(h) != 2*KeyBytes {
		return noise.DHKey{}, ErrKeyFile
	}
	if _, err := hex.Decode(priv, h); err != nil {
		return noise.DHKey{}, ErrKeyFile
	}
	p, err := ecdh.X25519().NewPrivateKey(priv)
	if err != nil {
		return noise.DHKey{}, ErrKeyFile
	}
	return noise.DHKey{Private: priv, Public: p.PublicKey().Bytes()}, nil
}

// LoadOrCreateKey reads the relay's static key from dir, creating it
// (owner-only, synced) if there is none; created says it was.
func LoadOrCreateKey(dir string) (k noise.DHKey, created bool, err error) {
	k, err = LoadKey(dir)
	if !errors.Is(err, os.ErrNotExist) {
		return k, false, err
	}
	if err := ownerperm.MkdirAll(dir); err != nil {
		return noise.DHKey{}, false, err
	}
	return LoadOrCreateKeyFile(KeyPath(dir))
}

// LoadOrCreateKeyFile reads the relay's static key from path, creating it
// (owner-only, synced) if there is none, in path's directory, which must
// exist; created says it was.
func LoadOrCreateKeyFile(path string) (k noise.DHKey, created bool, err error) {
	k, err = LoadKeyFile(path)
	if !errors.Is(err, os.ErrNotExist) {
		return k, false, err
	}
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	k, err = noise.DH25519.GenerateKeypair(rand.Reader)
	if err != nil {
		return noise.DHKey{}, false, err
	}
	// Written whole to a temp file and linked into place: a crash leaves
	// either no key file or a whole one, and of two processes starting at
	// once the second reads the first one's key.
	f, err := os.CreateTemp(dir, "."+name+".tmp-*") // mode 0600
	if err != nil {
		return noise.DHKey{}, false, err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(hex.EncodeToString(k.Private) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return noise.DHKey{}, false, err
	}
	if err := os.Link(f.Name(), path); errors.Is(err, os.ErrExist) {
		k, err = LoadKeyFile(path)
		return k, false, err
	} else if err != nil {
		return noise.DHKey{}, false, err
	}
	return k, true, nil
}
