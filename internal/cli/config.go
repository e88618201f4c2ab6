package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// serve's configuration (docs/operations.md#configuration): every flag of
// serve may also be a key of a TOML file (--config) or an environment
// variable, with the flag's name: `http = "127.0.0.1:7475"`,
// BUSBAR_SERVE_HTTP. A flag given on the command line wins over the file,
// the file over the environment, the environment over the default.

// envServePrefix starts the environment variable of each serve flag:
// BUSBAR_SERVE_ and the flag's name in capitals, '-' as '_'. Its own
// prefix, so a client's BUSBAR_NAME never renames the broker.
const envServePrefix = "BUSBAR_SERVE_"

// The flags about the configuration itself, which no file sets.
const (
	flagConfig      = "config"
	flagPrintConfig = "print-config"
)

// ErrConfig is wrapped by every error in a configuration file.
var ErrConfig = errors.New("configuration")

// serveEnvVar is flag name's environment variable.
func serveEnvVar(name string) string {
	return envServePrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// applyConfig fills the flags of fs not given on the command line from
// the file at path ("" for none), then from the environment (env looks a
// variable up, as os.LookupEnv).
func applyConfig(fs *flag.FlagSet, path string, env func(string) (string, bool)) error {
	given := map[string]bool{flagConfig: true, flagPrintConfig: true}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if path != "" {
		fromFile, err := readConfig(fs, path)
		if err != nil {
			return err
		}
		for _, name := range slices.Sorted(maps.Keys(fromFile)) {
			if given[name] {
				continue
			}
			if err := fs.Set(name, fromFile[name]); err != nil {
				return fmt.Errorf("%w: %s: %s: %v", ErrConfig, path, name, err)
			}
			given[name] = true
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		if v, ok := env(serveEnvVar(f.Name)); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%w: $%s: %v", ErrConfig, serveEnvVar(f.Name), serr)
			}
		}
	})
	return err
}

// readConfig reads a TOML file of flag names and values, as the flags'
// own text.
func readConfig(fs *flag.FlagSet, path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	var raw map[string]any
	if err := toml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		if fs.Lookup(k) == nil || k == flagConfig || k == flagPrintConfig {
			return nil, fmt.Errorf("%w: %s: unknown key %q (the keys are serve's flags: busbar serve --help)", ErrConfig, path, k)
		}
		switch x := v.(type) {
		case string:
			out[k] = x
		case bool:
			out[k] = strconv.FormatBool(x)
		case int64:
			out[k] = strconv.FormatInt(x, 10)
		case float64:
			out[k] = strconv.FormatFloat(x, 'g', -1, 64)
		default:
			return nil, fmt.Errorf("%w: %s: %s: a %T, want a string, number or boolean", ErrConfig, path, k, v)
		}
	}
	return out, nil
}

// printConfig writes the effective configuration as a TOML file that
// --config takes back. resolve gives a flag's effective value where its
// default stands for something else (data's "" for the default directory).
func printConfig(w io.Writer, fs *flag.FlagSet, resolve map[string]string) {
	fmt.Fprintln(w, "# busbar serve: the effective configuration (flags > file > environment > defaults)")
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == flagConfig || f.Name == flagPrintConfig {
			return
		}
		val := f.Value.String()
		if r, ok := resolve[f.Name]; ok {
			val = r
		}
		g, _ := f.Value.(flag.Getter)
		var v any = val
		if g != nil {
			switch x := g.Get().(type) {
			case bool, int, int64, uint, uint64:
				v = x
			case float64:
				v = x
			case time.Duration:
				v = x.String()
			}
		}
		fmt.Fprintf(w, "%s = %s\n", quoteKey(f.Name), tomlValue(v))
	})
}

// quoteKey quotes a key TOML would not take bare (none of serve's).
func quoteKey(k string) string {
	for _, r := range k {
		if !(r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return strconv.Quote(k)
		}
	}
	return k
}

func tomlValue(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case float64:
		s := strconv.FormatFloat(x, 'f', -1, 64)
		if !strings.ContainsAny(s, ".eE") {
			s += ".0"
		}
		return s
	default:
		return fmt.Sprint(x)
	}
}
