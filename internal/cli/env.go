package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/transport"
)

// Defaults shared by serve and the client verbs, so that with no flags a
// client finds the broker the same OS user started.
const (
	defaultTCP     = "127.0.0.1:7474"
	socketName     = "busbar.sock"
	defaultTimeout = 30 * time.Second
)

// Environment variables equivalent to the common flags.
const (
	envData        = "BUSBAR_DATA"
	envServer      = "BUSBAR_SERVER"
	envName        = "BUSBAR_NAME"
	envCredentials = "BUSBAR_CREDENTIALS"
	envCA          = "BUSBAR_CA"
)

// defaultDataDir is $BUSBAR_DATA, else $XDG_STATE_HOME/busbar, else
// ~/.local/state/busbar (on Windows %LocalAppData%\busbar, where a
// user's own state lives there), made absolute (socket endpoints must be).
func defaultDataDir() string {
	if d := os.Getenv(envData); d != "" {
		return absPath(d)
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(absPath(d), "busbar")
	}
	if d := os.Getenv("LocalAppData"); runtime.GOOS == "windows" && d != "" {
		return filepath.Join(absPath(d), "busbar")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), fmt.Sprintf("busbar-%d", os.Getuid()))
	}
	return filepath.Join(home, ".local", "state", "busbar")
}

// absPath is p made absolute against the working directory; p as given
// if that fails (the error shows up where p is used).
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// dirFlag is a flag naming a directory, kept absolute: a relative --data
// is taken against the working directory, and the socket paths made from
// it are absolute as endpoints must be.
type dirFlag struct{ p *string }

func (f dirFlag) String() string {
	if f.p == nil {
		return ""
	}
	return *f.p
}

func (f dirFlag) Set(v string) error {
	*f.p = ""
	if v != "" {
		*f.p = absPath(v)
	}
	return nil
}

// connFlags are the flags every client verb takes.
type connFlags struct {
	data, server, name, credentials string
	ca                              string // PEM file of the CAs trusted for tls:// servers
	timeout                         time.Duration
}

func (f *connFlags) register(fs *flag.FlagSet) {
	fs.Var(dirFlag{&f.data}, "data", "data directory of the local broker (env "+envData+"; default ~/.local/state/busbar)")
	fs.StringVar(&f.server, "server", os.Getenv(envServer), "broker endpoint: unix:///path, tcp://host:port, tls://host:port, ws://host:port, wss://host:port, or several separated by commas, tried in order (env "+envServer+"; default the local broker's socket)")
	fs.StringVar(&f.name, "name", os.Getenv(envName), "node name to register as (env "+envName+"; default cli-<pid>)")
	fs.StringVar(&f.credentials, "credentials", os.Getenv(envCredentials), "credentials file (env "+envCredentials+"; default <data>/credentials.json)")
	fs.DurationVar(&f.timeout, "timeout", defaultTimeout, "deadline of the operation, queueing included")
	fs.StringVar(&f.ca, "ca", os.Getenv(envCA), "PEM file of the certificate authorities trusted for tls:// servers, instead of the system's (env "+envCA+")")
}

// tlsConfig is nil (the system's roots), or trusts exactly the
// certificates of --ca.
func (f *connFlags) tlsConfig() (*tls.Config, error) {
	if f.ca == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(f.ca)
	if err != nil {
		return nil, fmt.Errorf("--ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca %s: no PEM certificate in it", f.ca)
	}
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

// options fills client options from the flags, with defaults from the
// local broker's data directory.
func (f *connFlags) options() (client.Options, error) {
	data := cmp.Or(f.data, defaultDataDir())
	cred, err := auth.LoadCredential(cmp.Or(f.credentials, filepath.Join(data, auth.CredentialsFile)))
	if errors.Is(err, fs.ErrNotExist) && f.credentials == "" && f.server == "" {
		// No credentials where a local broker makes them: none ever ran.
		return client.Options{}, fmt.Errorf("no broker has run with data directory %s (it has no %s): start one with `busbar serve`", data, auth.CredentialsFile)
	}
	if errors.Is(err, fs.ErrNotExist) && f.credentials == "" {
		// A remote broker: its owner has to hand out credentials.
		return client.Options{}, fmt.Errorf("%s needs credentials, and there are none at %s: on the broker's host its owner runs "+
			"`busbar principal add NAME --out FILE` (with the permissions NAME needs); give that file with --credentials FILE or %s",
			f.server, filepath.Join(data, auth.CredentialsFile), envCredentials)
	}
	if err != nil {
		return client.Options{}, err
	}
	tc, err := f.tlsConfig()
	if err != nil {
		return client.Options{}, err
	}
	return client.Options{
		TLS:        tc,
		Server:     cmp.Or(f.server, "unix://"+filepath.Join(data, socketName)),
		Node:       cmp.Or(f.name, fmt.Sprintf("cli-%d", os.Getpid())),
		Credential: cred,
		// Not the client's default (60 attempts): a verb ends with its
		// connection and says so, unless it runs until interrupted and
		// turns reconnecting on for ever (verbSetup.reconnecting).
		MaxReconnects: client.NoReconnect,
	}, nil
}

// connect opens a client with the flags; tune, if set, adjusts the options.
func (f *connFlags) connect(ctx context.Context, tune func(*client.Options)) (*client.Client, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	if tune != nil {
		tune(&opts)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.Connect(cctx, opts)
	return c, connectError(err, opts.Server)
}

// connectError says what a failed connect means for the user, in one
// line: no broker listening (and how to start one), a peer that is not a
// busbar broker, or bad input (exit status 2, see isInputError).
func connectError(err error, server string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, client.ErrNotBroker):
		return fmt.Errorf("%s is not a busbar broker (it does not speak the busbar protocol; check --server)", server)
	case errors.Is(err, fs.ErrNotExist) || transport.IsConnRefused(err):
		if strings.Contains(server, ",") {
			return fmt.Errorf("no broker is listening at any of %s: start one with `busbar serve`, or check --server", server)
		}
		return fmt.Errorf("no broker is listening at %s: start one with `busbar serve`, or check --server", server)
	}
	return err
}
