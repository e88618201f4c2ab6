package ops

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TokenFile is the name of the token's file in the data directory.
const TokenFile = "http-token"

// tokenBytes is a new token's entropy (hex-encoded in the file, so twice
// as many characters).
const tokenBytes = 32

// MinTokenLen is the shortest token LoadToken takes from a file an
// operator wrote: 32 characters, 128 bits if they are hex.
const MinTokenLen = 32

// ErrBadToken says the token file holds no usable token.
var ErrBadToken = errors.New("ops: token file holds no token")

// LoadToken returns the token in dir's TokenFile, creating the file (mode
// 0600: only the broker's OS user reads it) with a fresh random token when
// it is missing. created says it was.
func LoadToken(dir string) (token string, created bool, err error) {
	path := filepath.Join(dir, TokenFile)
	data, err := os.ReadFile(path)
	if err == nil {
		tok := strings.TrimSpace(string(data))
		if len(tok) < MinTokenLen { // a short token is guessable: refuse it
			return "", false, fmt.Errorf("%w: %s (delete it to get a new one)", ErrBadToken, path)
		}
		return tok, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	var b [tokenBytes]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	tok := hex.EncodeToString(b[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, err
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		_ = f.Close()
		return "", false, err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return "", false, err
	}
	return tok, true, f.Close()
}
