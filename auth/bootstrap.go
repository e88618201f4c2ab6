package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"busbar/internal/ownerperm"
)

const (
	// PrincipalsFile is the broker's principal store inside the data dir.
	PrincipalsFile = "principals.json"
	// CredentialsFile holds the local client's Credential, for clients run
	// by the same OS user as the broker.
	CredentialsFile = "credentials.json"
)

// BootstrapResult says what Bootstrap did.
type BootstrapResult struct {
	Dir, PrincipalsPath, CredentialsPath string
	Created                              bool // both files were written
}

// Bootstrap prepares a data directory so a fresh install works with no
// configuration: it makes dir (mode 0700; an existing dir that group or
// others can access is refused with ErrInsecureFile rather than changed,
// since it may be a directory the user shares on purpose, and the socket
// in it must not be reachable by other users), and if PrincipalsFile is
// absent writes a
// principal "local" (fresh secret, Nodes ["*"], AllPermissions()) plus a
// CredentialsFile holding that secret. Both files are 0600 and written
// atomically.
//
// If PrincipalsFile exists nothing is written, even if CredentialsFile is
// missing: the secret cannot be recovered from its hash, and overwriting an
// operator's store would be worse. CredentialsFile is written first so a
// crash in between leaves no principals file and the next run starts over.
// Bootstrap is meant to be called once at startup, not concurrently on the
// same dir.
func Bootstrap(dir string) (BootstrapResult, error) {
	r := BootstrapResult{
		Dir:             dir,
		PrincipalsPath:  filepath.Join(dir, PrincipalsFile),
		CredentialsPath: filepath.Join(dir, CredentialsFile),
	}
	if err := PrepareDataDir(dir); err != nil {
		return r, err
	}

	if _, err := os.Lstat(r.PrincipalsPath); err == nil {
		return r, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return r, fmt.Errorf("auth: bootstrap: %w", err)
	}

	secret, hash, err := NewSecret()
	if err != nil {
		return r, fmt.Errorf("auth: bootstrap: %w", err)
	}
	creds, err := indentNoEscape(Credential{Principal: "local", Secret: secret})
	if err != nil {
		return r, err
	}
	store, err := indentNoEscape(principalsFile{Principals: []Principal{{
		Name:        "local",
		SecretHash:  hash,
		Nodes:       []Pattern{"*"},
		Permissions: AllPermissions(),
	}}})
	if err != nil {
		return r, err
	}
	if err := writeFileAtomic(r.CredentialsPath, creds); err != nil {
		return r, fmt.Errorf("auth: bootstrap: %w", err)
	}
	if err := writeFileAtomic(r.PrincipalsPath, store); err != nil {
		return r, fmt.Errorf("auth: bootstrap: %w", err)
	}
	r.Created = true
	return r, nil
}

// LoadCredential reads a CredentialsFile. Like Load it refuses a file
// group or others can access (ErrInsecureFile): it holds a live secret.
func LoadCredential(path string) (Credential, error) {
	data, err := readSecureFile(path)
	if err != nil {
		return Credential{}, err
	}
	var c Credential
	if err := decodeStrict(data, &c); err != nil {
		return Credential{}, fmt.Errorf("auth: %s: %w", path, err)
	}
	if c.Principal == "" {
		return Credential{}, fmt.Errorf("auth: %s: field principal is empty", path)
	}
	return c, nil
}

// PrepareDataDir makes dir with mode 0700, or checks that an existing one
// is a directory no other user can reach (ErrInsecureFile otherwise): the
// broker's socket, state and relay live in it. Bootstrap calls it; so
// does a broker given its principals file elsewhere, which needs the
// directory but no bootstrapped credentials.
func PrepareDataDir(dir string) error {
	if err := ownerperm.MkdirAll(dir); err != nil {
		return fmt.Errorf("auth: data directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("auth: data directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("auth: data directory: %s is not a directory", dir)
	}
	if why := ownerperm.Exposed(dir, fi, 0o077, false); why != "" {
		return fmt.Errorf("%w: data directory %s has %s; other users could reach its socket and files (%s, or choose another)", ErrInsecureFile, dir, why, ownerperm.Fix(dir, true))
	}
	return nil
}

// WriteCredential writes c as a credentials file at path (mode 0600,
// atomically); an existing file is refused (fs.ErrExist), never replaced.
func WriteCredential(path string, c Credential) error {
	data, err := CredentialJSON(c)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("auth: %s: %w", path, fs.ErrExist)
	}
	return writeFileAtomic(path, data)
}

// CredentialJSON is the content of a credentials file holding c.
func CredentialJSON(c Credential) ([]byte, error) { return indentNoEscape(c) }
