package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"busbar/ops"
	"busbar/transport"
)

// maxStatusBytes bounds the status JSON `busbar status` reads: far past
// a broker's real status (it lists every node and service of the bus),
// so a wrong --http cannot make it read without end.
const maxStatusBytes = 64 << 20

func init() {
	addVerb(runStatus, []helpPage{
		{path: "status", summary: "the broker's readiness and figures in one screen (exit 1 when not ready)",
			text: `Prints the local broker's readiness, version, uptime, connections, queued
messages, drops by reason and durable relay inboxes, from its status API
(docs/operations.md#the-status-api): over the broker's HTTP socket in its
data directory, with the token there, so the owner needs nothing more.
--http names another HTTP listener (with --token-file, the token its
broker keeps in <data>/http-token). --json prints the same as one JSON
object. The exit status says whether the broker is ready, for scripts and
systemd checks.`,
			exit:    "0  the broker is ready\n1  it is not ready (the reason is printed), or could not be asked\n2  usage: a bad flag or value",
			example: "$ busbar status\n$ busbar status --json\n$ busbar status --http https://bus.example:7475 --token-file ./http-token"},
	})
}

// runStatus is `busbar status`: the broker's readiness and figures in one
// screen, from its status API (the owner's HTTP socket and token by
// default), exit status 0 only when it is ready.
func runStatus(args []string, stdio IO) int {
	flags := flag.NewFlagSet("status", flag.ContinueOnError)
	var data string
	flags.Var(dirFlag{&data}, "data", "data directory of the local broker (env "+envData+"; default ~/.local/state/busbar)")
	httpURL := flags.String("http", "", "`URL` of the broker's HTTP listener: http://HOST:PORT, https://HOST:PORT or unix:///PATH (default the local broker's HTTP socket, <data>/busbar-http.sock)")
	tokenFile := flags.String("token-file", "", "`FILE` holding the broker's HTTP token (default <data>/"+ops.TokenFile+")")
	asJSON := flags.Bool("json", false, "print the status as one JSON object (the fields of the text, named as in the status API)")
	timeout := flags.Duration("timeout", 10*time.Second, "deadline of the status request")
	ca := flags.String("ca", os.Getenv(envCA), "PEM `FILE` of the certificate authorities trusted for an https:// --http, instead of the system's (env "+envCA+")")
	if !parseNoArgs(stdio, "status", flags, args) {
		return exitUsage
	}
	if *httpURL != "" && *tokenFile == "" {
		// The local token is for the local broker only: never sent elsewhere.
		return usageError(stdio, "status", "--http needs --token-file: the token of that broker (its <data>/%s)", ops.TokenFile)
	}
	data = cmp.Or(data, defaultDataDir())
	fail := func(err error) int {
		fmt.Fprintf(stdio.Stderr, "busbar status: %v\n", err)
		if isInputError(err) {
			return exitUsage
		}
		return exitFail
	}
	tok, err := os.ReadFile(cmp.Or(*tokenFile, filepath.Join(data, ops.TokenFile)))
	if errors.Is(err, fs.ErrNotExist) && *tokenFile == "" {
		return fail(fmt.Errorf("no broker has run with data directory %s (it has no %s): start one with `busbar serve`, or give --data", data, ops.TokenFile))
	}
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	where := cmp.Or(*httpURL, localHTTP(data))
	tc, err := (&connFlags{ca: *ca}).tlsConfig()
	if err != nil {
		return fail(err)
	}
	st, err := fetchStatus(ctx, where, strings.TrimSpace(string(tok)), tc)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdio.Stdout)
		_ = enc.Encode(summarise(st))
	} else {
		printStatus(stdio.Stdout, summarise(st))
	}
	if !st.Ready {
		return exitFail
	}
	return exitOK
}

// fetchStatus GETs the status API at where (an http(s) base URL or
// unix:///PATH) with the token.
func fetchStatus(ctx context.Context, where, token string, tc *tls.Config) (*ops.Status, error) {
	resp, body, err := askBroker(ctx, http.MethodGet, where, ops.StatusPath, token, tc)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("%s refused the token (check --token-file: the broker's is <data>/%s)", where, ops.TokenFile)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s: %s: %s", where, resp.Status, strings.TrimSpace(string(body)))
	}
	var st ops.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("%s did not answer a busbar status: %w", where, err)
	}
	return &st, nil
}

// errNoBrokerHTTP says that nothing listens at the broker's HTTP address.
var errNoBrokerHTTP = errors.New("no broker is listening")

// localHTTP is the HTTP socket of the broker of data directory data.
func localHTTP(data string) string {
	return "unix://" + filepath.Join(data, strings.TrimSuffix(socketName, filepath.Ext(socketName))+httpSocketSuffix)
}

// askBroker sends method path with the token to the broker's HTTP
// listener at where (an http(s) base URL, trusting tc's roots, or
// unix:///PATH) and returns
// the response and its body (up to maxStatusBytes). Nothing listening
// there is errNoBrokerHTTP.
func askBroker(ctx context.Context, method, where, path, token string, tc *tls.Config) (*http.Response, []byte, error) {
	hc, base := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}, strings.TrimSuffix(where, "/")
	if sock, ok := strings.CutPrefix(where, "unix://"); ok {
		var d net.Dialer
		hc.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}}
		base = "http://busbar"
	} else if !strings.HasPrefix(where, "http://") && !strings.HasPrefix(where, "https://") {
		return nil, nil, &inputError{fmt.Errorf("--http %q: want http://HOST:PORT, https://HOST:PORT or unix:///PATH", where)}
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return nil, nil, &inputError{fmt.Errorf("--http %q: %w", where, err)}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || transport.IsConnRefused(err) {
			return nil, nil, fmt.Errorf("%w at %s: start one with `busbar serve`, or check --http", errNoBrokerHTTP, where)
		}
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	return resp, body, nil
}

// statusSummary is what `busbar status` prints (--json: this object).
type statusSummary struct {
	Broker        string                         `json:"broker"`
	Ready         bool                           `json:"ready"`
	NotReady      string                         `json:"not_ready,omitempty"`
	Version       string                         `json:"version,omitempty"`
	Protocol      string                         `json:"protocol"`
	UptimeSeconds float64                        `json:"uptime_seconds"`
	Connections   int                            `json:"connections"`
	Nodes         int                            `json:"nodes"`    // on the whole bus
	Services      int                            `json:"services"` // on the whole bus
	Queued        int64                          `json:"queued_messages"`
	QueuedBytes   int64                          `json:"queued_bytes"`
	Dropped       map[string]int64               `json:"dropped"` // reasons with a count only
	Relay         *relaySummary                  `json:"relay,omitempty"`
	RelayProtos   map[string]ops.ProtocolInboxes `json:"relay_protocols,omitempty"`
}

type relaySummary struct {
	Inboxes int   `json:"inboxes"`
	Blobs   int   `json:"blobs"`
	Bytes   int64 `json:"bytes"`
}

func summarise(st *ops.Status) statusSummary {
	s := statusSummary{Broker: st.Broker, Ready: st.Ready, NotReady: st.NotReady, Version: st.Version, Protocol: st.Protocol,
		UptimeSeconds: st.UptimeSeconds, Connections: st.Connections, Nodes: len(st.Nodes), Services: len(st.Services),
		Queued: st.Traffic.Queued, QueuedBytes: st.Traffic.QueuedBytes, Dropped: map[string]int64{}, RelayProtos: st.RelayProtocols}
	for r, n := range st.Dropped {
		if n != 0 {
			s.Dropped[r] = n
		}
	}
	if st.Relay != nil {
		s.Relay = &relaySummary{Inboxes: st.Relay.Inboxes, Blobs: st.Relay.Blobs, Bytes: st.Relay.Bytes}
	}
	return s
}

func printStatus(w io.Writer, s statusSummary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	ready := "ready"
	if !s.Ready {
		ready = "NOT READY: " + s.NotReady
	}
	fmt.Fprintf(tw, "broker\t%s, %s\n", s.Broker, ready)
	fmt.Fprintf(tw, "version\t%s, protocol %s\n", cmp.Or(s.Version, "unknown"), s.Protocol)
	fmt.Fprintf(tw, "uptime\t%s\n", (time.Duration(s.UptimeSeconds) * time.Second).String())
	fmt.Fprintf(tw, "connections\t%d (the bus: %d nodes, %d services)\n", s.Connections, s.Nodes, s.Services)
	fmt.Fprintf(tw, "queued\t%d messages, %s\n", s.Queued, byteSize(s.QueuedBytes))
	fmt.Fprintf(tw, "drops\t%s\n", dropLine(s.Dropped))
	switch {
	case s.Relay == nil:
		fmt.Fprintf(tw, "relay\tnot a relay\n")
	default:
		line := fmt.Sprintf("%d inboxes, %d blobs, %s", s.Relay.Inboxes, s.Relay.Blobs, byteSize(s.Relay.Bytes))
		var by []string
		for _, p := range slices.Sorted(maps.Keys(s.RelayProtos)) {
			in := s.RelayProtos[p]
			by = append(by, fmt.Sprintf("%s %d/%d", p, in.Inboxes, in.Blobs))
		}
		if len(by) > 0 {
			line += " (inboxes/blobs: " + strings.Join(by, ", ") + ")"
		}
		fmt.Fprintf(tw, "relay\t%s\n", line)
	}
	_ = tw.Flush()
}

// dropLine is "none", or the total and its reasons.
func dropLine(d map[string]int64) string {
	if len(d) == 0 {
		return "none"
	}
	var total int64
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(d)) {
		total += d[r]
		parts = append(parts, fmt.Sprintf("%s %d", r, d[r]))
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// byteSize is n in B, KiB, MiB or GiB, one decimal.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 2 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMG"[i])
}
