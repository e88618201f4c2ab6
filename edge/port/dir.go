package port

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"busbar/internal/ownerperm"
)

// EnvDir names the environment variable that overrides Dir.
const EnvDir = "BUSBAR_PORTS"

// socketExt ends every port's socket name: NAME.sock.
const socketExt = ".sock"

// Dir is where named ports live: $BUSBAR_PORTS, else
// $XDG_RUNTIME_DIR/busbar/ports, else busbar-UID/ports under the system's
// temporary directory (busbar/ports on Windows, whose temporary directory
// is the user's own). Listen creates it owner-only.
func Dir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "busbar", "ports")
	}
	if uid := os.Getuid(); uid >= 0 {
		return filepath.Join(os.TempDir(), "busbar-"+strconv.Itoa(uid), "ports")
	}
	return filepath.Join(os.TempDir(), "busbar", "ports") // Windows: no uid, and a temporary directory per user
}

// CosmixDir is where cosmix serves its ports (/run/user/UID/cosmix/ports),
// searched after Dir by Resolve and listed by List, so cosmix programs'
// ports are reached by name too.
func CosmixDir() string {
	return filepath.Join("/run/user", strconv.Itoa(os.Getuid()), "cosmix", "ports")
}

// ValidName returns nil if name may name a port: 1 to MaxNameLen bytes of
// [a-z0-9_.-], starting with a letter or digit (so it is a file name, and
// the path of the channel "port:NAME").
func ValidName(name string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrBadName, name, why) }
	switch {
	case name == "":
		return bad("empty")
	case len(name) > MaxNameLen:
		return bad(fmt.Sprintf("longer than %d bytes", MaxNameLen))
	case !alnum(name[0]):
		return bad("must start with a letter or digit")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !alnum(c) && c != '_' && c != '.' && c != '-' {
			return bad("want [a-z0-9_.-]")
		}
	}
	return nil
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// Path is the socket of the port name in Dir.
func Path(name string) (string, error) {
	if err := ValidName(name); err != nil {
		return "", err
	}
	return filepath.Join(Dir(), name+socketExt), nil
}

// Resolve turns what a user typed into a socket path: anything holding a
// '/' is a path; a name is looked up in Dir, then in CosmixDir, and is
// Dir's path when neither holds it (the call then fails to dial).
func Resolve(nameOrPath string) (string, error) {
	if strings.ContainsAny(nameOrPath, `/`+string(filepath.Separator)) {
		return nameOrPath, nil
	}
	p, err := Path(nameOrPath)
	if err != nil {
		return "", err
	}
	for _, candidate := range []string{p, filepath.Join(CosmixDir(), nameOrPath+socketExt)} {
		if fi, err := os.Stat(candidate); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return candidate, nil
		}
	}
	return p, nil
}

// Listen binds a Unix socket for a port at path (mode 0600). When path is
// in Dir, Dir is created with mode 0700 and refused (ErrUnsafeDir) if
// other users can reach it. A socket file left by a port that is gone is
// replaced; a live one is ErrPortInUse.
func Listen(path string) (net.Listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("port: socket path %q is %d bytes, the limit is %d", path, len(path), maxSocketPath)
	}
	dir := filepath.Dir(path)
	if dir == filepath.Clean(Dir()) {
		if err := privateDir(dir); err != nil {
			return nil, err
		}
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("port: %s exists and is not a socket", path)
		}
		if live(path) {
			return nil, fmt.Errorf("%w: %s answers", ErrPortInUse, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	// Not umask: it is the whole process's. Inside Dir (0700) nobody else
	// could connect before the chmod anyway.
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// privateDir creates dir (0700, or an owner-only ACL on Windows) and
// checks that it is ours and private.
func privateDir(dir string) error {
	if err := ownerperm.MkdirAll(dir); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if why := ownerperm.Exposed(dir, fi, 0o077, true); why != "" {
		return fmt.Errorf("%w: %s has %s (want it private to this user: %s)", ErrUnsafeDir, dir, why, ownerperm.Fix(dir, true))
	}
	return nil
}

// live reports whether something accepts connections at path.
func live(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Entry is one socket in a ports directory.
type Entry struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Dir  string `json:"dir"` // "busbar" or "cosmix"
	Info *Info  `json:"info,omitempty"`
	// Error says why info did not answer: a stale socket, a busy port.
	Error string `json:"error,omitempty"`
}

// List returns the sockets in Dir and CosmixDir, sorted by name, each
// asked for info with timeout (a port that does not answer in time is
// listed with the error).
func List(ctx context.Context, timeout time.Duration) ([]Entry, error) {
	var out []Entry
	for _, d := range []struct{ kind, dir string }{{"busbar", Dir()}, {"cosmix", CosmixDir()}} {
		names, err := os.ReadDir(d.dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			name, ok := strings.CutSuffix(n.Name(), socketExt)
			if !ok || n.Type()&os.ModeSocket == 0 {
				continue
			}
			e := Entry{Name: name, Path: filepath.Join(d.dir, n.Name()), Dir: d.kind}
			cctx, cancel := context.WithTimeout(ctx, timeout)
			info, _, err := CallPortTyped[Info](cctx, e.Path, CmdInfo, nil)
			cancel()
			if err != nil {
				e.Error = err.Error()
			} else {
				e.Info = &info
			}
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
