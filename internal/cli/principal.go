package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"busbar/auth"
	"busbar/ops"
)

func init() {
	addVerb(runPrincipal, []helpPage{
		{path: "principal", summary: "the broker's principals: add, list, remove (edits principals.json)",
			text: `Edits the broker's principals file (--principals, else
<data>/principals.json): checked before and after the change, written
atomically, other entries untouched. add and remove have the broker
running on the data directory reload it before they return (over its
owner-only HTTP socket), without dropping connections, and say so; after
an edit by hand, SIGHUP does the same.`,
			exit:    "0  done (and the running broker, if any, took it)\n1  the file could not be read or written, NAME does not exist, or a running\n   broker refused the file or could not be told (send it SIGHUP)\n2  usage",
			example: "$ busbar principal add sensor --nodes 'sensor-*' --publish 'metrics.>' --out sensor.json"},
		{path: "principal add", args: "NAME", summary: "add a principal and print its credentials file",
			text: `Adds principal NAME with a fresh secret and the permissions the flags give,
and prints the credentials file a client presents (or writes it, 0600, with
--out).`, example: "$ busbar principal add sensor --nodes 'sensor-*' --publish 'metrics.>'"},
		{path: "principal list", summary: "list the principals and their permissions",
			text: "Prints one principal a line (--json: a JSON array); secrets are never shown.", example: "$ busbar principal list"},
		{path: "principal remove", args: "NAME", summary: "remove a principal",
			text: "Removes principal NAME. The running broker refuses its new logins once remove\nreturns; connections already open keep going until they end (a reload drops no connection).", example: "$ busbar principal remove sensor"},
	})
}

// runPrincipal is `busbar principal add|list|remove`: the broker's
// principals file, edited in place (auth.AddPrincipal). The broker running
// on the data directory takes the change at once (tellBroker).
func runPrincipal(args []string, stdio IO) int {
	subs := map[string]func([]string, IO) int{"add": principalAdd, "list": principalList, "remove": principalRemove}
	if code, ok := pickSubcommand(stdio, "principal", args); !ok {
		return code
	}
	return subs[args[0]](args[1:], stdio)
}

// principalFlags are the flags every principal operation takes.
type principalFlags struct {
	v    *verbSetup
	file string // --principals
}

func newPrincipalVerb(op string, nargs int, stdio IO) *principalFlags {
	name := "principal " + op
	p, _ := page(name)
	v := &verbSetup{name: name, usage: p.args, nargs: func(n int) bool { return n == nargs }, stdio: stdio, fs: flag.NewFlagSet("busbar "+name, flag.ContinueOnError)}
	// This edits a file: of the connection flags only --data applies (it
	// locates principals.json); the others are not offered at all.
	v.fs.Var(dirFlag{&v.conn.data}, "data", "data directory of the broker (env "+envData+"; default ~/.local/state/busbar)")
	return &principalFlags{v: v}
}

// path is the principals file: --principals, else <data>/principals.json.
func (f *principalFlags) path() string {
	return cmp.Or(f.file, filepath.Join(cmp.Or(f.v.conn.data, defaultDataDir()), auth.PrincipalsFile))
}

// patternList is a comma-separated list of patterns, repeatable.
type patternList []auth.Pattern

func (l *patternList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(patternStrings(*l), ",")
}

func patternStrings(ps []auth.Pattern) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}
func (l *patternList) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		*l = append(*l, auth.Pattern(strings.TrimSpace(part)))
	}
	return nil
}

func principalAdd(args []string, stdio IO) int {
	f := newPrincipalVerb("add", 1, stdio)
	f.v.fs.StringVar(&f.file, "principals", "", "principals file (default <data>/principals.json)")
	nodes := patternList{}
	f.v.fs.Var(&nodes, "nodes", `node names the principal may connect as: "*", "prefix-*" or a name (comma-separated, repeatable; default "*")`)
	var p auth.Permissions
	lists := []struct {
		flag string
		list *[]auth.Pattern
	}{
		{"send", &p.Send}, {"request", &p.Request}, {"publish", &p.Publish}, {"subscribe", &p.Subscribe}, {"handle", &p.Handle},
		{"tap", &p.Tap}, {"state-read", &p.StateRead}, {"state-write", &p.StateWrite}, {"state-admin", &p.StateAdmin},
	}
	what := map[string]string{
		"send": "channels it may send events on", "request": "channels it may send requests on",
		"publish": "channels it may publish on", "subscribe": "channels it may subscribe to",
		"handle": "channels it may handle requests on", "tap": "channels whose traffic it may see with busbar tap",
		"state-read": "state namespaces it may read", "state-write": "state namespaces it may write",
		"state-admin": "state namespaces it may drop or give to another owner",
	}
	for _, l := range lists {
		f.v.fs.Var((*patternList)(l.list), l.flag, what[l.flag]+" (patterns such as orders.* or orders.>; comma-separated, repeatable)")
	}
	relay := f.v.fs.Bool("relay", false, "may push sealed blobs into the durable relay's inboxes (which takes its disk; off unless given)")
	all := f.v.fs.Bool("all", false, `every channel and every namespace (">" in every list), and the relay`)
	out := f.v.fs.String("out", "", "write the credentials file here (0600; never replaced) instead of printing it")
	mb := f.v.fs.Bool("moonbridge", false, "a key for a MoonBridge backend (busbar serve --moonbridge) instead of a busbar secret: prints the key id and secret as the backend plugin's config.yml takes them")
	if !f.v.parse(args) {
		return exitUsage
	}
	if *mb && *out != "" {
		fmt.Fprintln(stdio.Stderr, "busbar principal add: --moonbridge prints the plugin's configuration; --out is for busbar credentials")
		return exitUsage
	}
	if *all {
		p = auth.AllPermissions()
	}
	p.Relay = p.Relay || *relay
	for _, l := range lists {
		if *l.list == nil {
			*l.list = []auth.Pattern{} // written as [], which the file format reads as "nothing", never as a default
		}
	}
	if len(nodes) == 0 {
		nodes = patternList{"*"}
	}
	path := f.path()
	if *mb {
		return moonbridgeAdd(f, path, auth.Principal{Name: f.v.arg(0), Nodes: nodes, Permissions: p}, stdio)
	}
	cred, err := auth.AddPrincipal(path, auth.Principal{Name: f.v.arg(0), Nodes: nodes, Permissions: p})
	switch {
	case errors.Is(err, auth.ErrPrincipalExists):
		return f.v.fail(stdio, err, exitFail)
	case errors.Is(err, auth.ErrBadPrincipal):
		return f.v.fail(stdio, err, exitUsage)
	case err != nil:
		return f.v.fail(stdio, err, exitFail)
	}
	if *out != "" {
		if err := auth.WriteCredential(*out, cred); err != nil {
			// The principal is in the file; its secret only here.
			_ = auth.RemovePrincipal(path, cred.Principal)
			return f.v.fail(stdio, fmt.Errorf("%w (the principal was not added)", err), exitFail)
		}
	} else {
		data, _ := auth.CredentialJSON(cred)
		_, _ = stdio.Stdout.Write(data)
	}
	return f.tellBroker(stdio, fmt.Sprintf("%s added to %s", cred.Principal, path), path)
}

// moonbridgeAdd adds a principal with a MoonBridge key and prints the
// key in the form of MoonBridge's backend plugin configuration
// (backend-bukkit's config.yml).
func moonbridgeAdd(f *principalFlags, path string, p auth.Principal, stdio IO) int {
	k, err := auth.AddMoonBridgePrincipal(path, p)
	switch {
	case errors.Is(err, auth.ErrPrincipalExists):
		return f.v.fail(stdio, err, exitFail)
	case errors.Is(err, auth.ErrBadPrincipal):
		return f.v.fail(stdio, err, exitUsage)
	case err != nil:
		return f.v.fail(stdio, err, exitFail)
	}
	name := moonbridgeBackendName(p)
	data := cmp.Or(f.v.conn.data, defaultDataDir())
	host, port, running := runningMoonBridge(data)
	where := "the host of the running busbar serve --moonbridge"
	if !running {
		host, port, where = "127.0.0.1", "28081", "no busbar serve --moonbridge is running on "+data+": set the host and port it will listen on"
		fmt.Fprintf(stdio.Stderr, "busbar principal add: no broker with --moonbridge is running on %s: proxyHost and proxyPort are placeholders\n", data)
	}
	fmt.Fprintf(stdio.Stdout, `# MoonBridge backend plugin (config.yml) for busbar serve --moonbridge HOST:PORT
proxyHost: %q   # %s
proxyPort: %s         # its port
instanceId: %q
backendName: %q   # the busbar node: one the principal may claim
gameAddress: "tcp://127.0.0.1:25565"
keyId: %q
secret: %q
`, host, where, port, name, name, k.KeyID, k.Secret)
	return f.tellBroker(stdio, fmt.Sprintf("%s added to %s with MoonBridge key id %s", p.Name, path, k.KeyID), path)
}

// runningMoonBridge is the host and port the --moonbridge listener of
// the broker running on data is bound to; false when no broker runs
// there, or it has no such listener. An unspecified host (0.0.0.0, ::)
// is given as 127.0.0.1.
func runningMoonBridge(data string) (host, port string, ok bool) {
	b, err := os.ReadFile(filepath.Join(data, moonbridgeAddrFile))
	if err != nil || !brokerListening(data) {
		return "", "", false
	}
	host, port, err = net.SplitHostPort(strings.TrimSpace(string(b)))
	if err != nil {
		return "", "", false
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return host, port, true
}

// moonbridgeBackendName is the backend name to suggest: the principal's
// one exact node name, else its name when it may claim it, else a
// placeholder to edit.
func moonbridgeBackendName(p auth.Principal) string {
	if len(p.Nodes) == 1 && auth.ValidNodeName(string(p.Nodes[0])) == nil {
		return string(p.Nodes[0])
	}
	if p.MayClaim(p.Name) {
		return p.Name
	}
	return "CHANGE-ME"
}

// principalJSON is one principal in `busbar principal list --json`.
type principalJSON struct {
	Name        string           `json:"name"`
	Auth        string           `json:"auth"` // "secret", "key" or "moonbridge"
	Nodes       []auth.Pattern   `json:"nodes"`
	Permissions auth.Permissions `json:"permissions"`
}

func principalList(args []string, stdio IO) int {
	f := newPrincipalVerb("list", 0, stdio)
	f.v.fs.StringVar(&f.file, "principals", "", "principals file (default <data>/principals.json)")
	asJSON := f.v.fs.Bool("json", false, "print a JSON array")
	if !f.v.parse(args) {
		return exitUsage
	}
	ps, err := auth.ListPrincipals(f.path())
	if err != nil {
		return f.v.fail(stdio, err, exitFail)
	}
	var out []principalJSON
	for _, p := range ps {
		kind := "secret"
		switch {
		case p.PublicKey != "":
			kind = "key"
		case p.MoonBridge != nil:
			kind = "moonbridge"
		}
		out = append(out, principalJSON{p.Name, kind, p.Nodes, p.Permissions})
	}
	if *asJSON {
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(out)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tAUTH\tNODES\tPERMISSIONS")
	for _, p := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, p.Auth, joinPatterns(p.Nodes), permissionSummary(p.Permissions))
	}
	_ = tw.Flush()
	return exitOK
}

// permissionSummary is a principal's non-empty lists, "publish=a.>,b
// subscribe=c", or "-".
func permissionSummary(p auth.Permissions) string {
	var parts []string
	for _, l := range []struct {
		name string
		list []auth.Pattern
	}{
		{"send", p.Send}, {"request", p.Request}, {"publish", p.Publish}, {"subscribe", p.Subscribe}, {"handle", p.Handle},
		{"tap", p.Tap}, {"state_read", p.StateRead}, {"state_write", p.StateWrite}, {"state_admin", p.StateAdmin},
	} {
		if len(l.list) > 0 {
			parts = append(parts, l.name+"="+joinPatterns(l.list))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func joinPatterns(ps []auth.Pattern) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ",")
}

func principalRemove(args []string, stdio IO) int {
	f := newPrincipalVerb("remove", 1, stdio)
	f.v.fs.StringVar(&f.file, "principals", "", "principals file (default <data>/principals.json)")
	if !f.v.parse(args) {
		return exitUsage
	}
	path := f.path()
	if err := auth.RemovePrincipal(path, f.v.arg(0)); err != nil {
		return f.v.fail(stdio, err, exitFail)
	}
	return f.tellBroker(stdio, fmt.Sprintf("%s removed from %s (its open connections stay until they end)", f.v.arg(0), path), path)
}

// reloadTimeout bounds the request that has a running broker reload
// the principals file.
const reloadTimeout = 10 * time.Second

// tellBroker has the broker running on the data directory reload the
// principals file just edited (path), over its owner-only HTTP socket
// with the token beside it, and says on stderr what came of it after
// done. No broker running is not an error: the next one loads the file.
// A broker that refuses the file (the previous principals stay in force
// there) exits 1.
func (f *principalFlags) tellBroker(stdio IO, done, path string) int {
	say := func(format string, args ...any) {
		fmt.Fprintf(stdio.Stderr, "busbar %s: %s; %s\n", f.v.name, done, fmt.Sprintf(format, args...))
	}
	data := cmp.Or(f.v.conn.data, defaultDataDir())
	tok, err := os.ReadFile(filepath.Join(data, ops.TokenFile))
	switch {
	case errors.Is(err, fs.ErrNotExist) && !brokerListening(data):
		say("no broker has run on %s: the next start loads it", data)
		return exitOK
	case err != nil:
		say("the running broker could not be told (its HTTP token: %v): send it SIGHUP", err)
		return exitFail
	}
	ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
	defer cancel()
	resp, body, err := askBroker(ctx, http.MethodPost, localHTTP(data), ops.ReloadPath, strings.TrimSpace(string(tok)), nil)
	if errors.Is(err, errNoBrokerHTTP) {
		if brokerListening(data) {
			// Its HTTP socket is off or elsewhere (--http-unix).
			say("a broker is running on %s but not its HTTP socket %s: send it SIGHUP", data, strings.TrimPrefix(localHTTP(data), "unix://"))
			return exitFail
		}
		say("no broker is running on %s: the next start loads it", data)
		return exitOK
	}
	var res ops.ReloadResult
	if err == nil {
		if jerr := json.Unmarshal(body, &res); jerr != nil {
			err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
	}
	switch {
	case err != nil:
		say("the running broker could not be told (%v): send it SIGHUP", err)
		return exitFail
	case res.Error != "":
		say("the running broker refused the file, and keeps its previous principals: %s", res.Error)
		return exitFail
	case !sameFile(res.File, path):
		say("the running broker on %s loads %s, not this file: nothing changed there", data, res.File)
		return exitOK
	}
	say("the running broker took it at once")
	return exitOK
}

// brokerListening reports whether a broker answers on data's bus socket.
func brokerListening(data string) bool {
	c, err := net.DialTimeout("unix", filepath.Join(data, socketName), reloadTimeout)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// sameFile reports whether a and b name one file.
func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA != nil || errB != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return os.SameFile(sa, sb)
}
