//go:build !unix

package relay

import (
	"os"
	"path/filepath"
)

// lockDir only creates dir/LOCK here: this platform has no flock, so two
// stores on one directory are not prevented.
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o600)
}
