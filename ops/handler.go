package ops

import (
	"bytes"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"busbar/broker"
)

// The paths Register serves.
const (
	MetricsPath = "/metrics"
	HealthPath  = "/healthz"
	ReadyPath   = "/readyz"
	StatusPath  = "/api/status"
	// ReloadPath reloads the broker's principals file (POST), as SIGHUP
	// does: how `busbar principal add|remove` reach a running broker.
	ReloadPath = "/api/principals/reload"
	// DashboardPath is the dashboard: a page that shows the status live.
	DashboardPath = "/"
)

//go:embed dashboard.html
var dashboardHTML []byte

// TokenParam is the query parameter that carries the token in a URL a
// person opens (a browser sends no Authorization header of its own).
const TokenParam = "token"

// Options are what Register serves.
type Options struct {
	Broker *broker.Broker
	// Token is required on every path but HealthPath, as
	// "Authorization: Bearer TOKEN" (the scheme in any case) or
	// ?token=TOKEN. It must not be empty.
	Token string
	// DataDir, when set, is probed by ReadyPath: the broker is not ready
	// when a file cannot be written and synced there (its stores are
	// there: a full or read-only disk).
	DataDir string
	// Authenticated, when set, hears of every request that carried the
	// token, before it is served: serve's HTTP listener stops counting
	// its connection as unauthenticated.
	Authenticated func(*http.Request)
	// Version is the broker binary's version, reported in the status
	// (busbar status shows it).
	Version string
	// ReloadPrincipals, when set, is what ReloadPath does: reload the
	// principals file, returning its path and why it was refused (the
	// previous principals then stay in force).
	ReloadPrincipals func() (file string, err error)
	// Collectors are more figures for /metrics, from the edges the broker
	// serves beside its own connections (serve --trueseal's).
	Collectors []prometheus.Collector
}

// Register adds the operator's endpoints to mux.
func Register(mux *http.ServeMux, o Options) {
	if o.Token == "" {
		panic("ops: Register without a token")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(o.Broker), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(o.Collectors...)
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})

	mux.HandleFunc("GET "+HealthPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET "+MetricsPath, o.guard(metrics))
	mux.Handle("GET "+ReadyPath, o.guard(http.HandlerFunc(o.ready)))
	mux.Handle("GET "+StatusPath, o.guard(http.HandlerFunc(o.status)))
	if o.ReloadPrincipals != nil {
		mux.Handle("POST "+ReloadPath, o.guard(http.HandlerFunc(o.reload)))
	}
	mux.Handle("GET "+DashboardPath+"{$}", o.guard(http.HandlerFunc(serveDashboard)))
	mux.Handle("GET "+LivePath, o.guard(o.live(&liveFeeds{})))
}

func serveDashboard(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// Its script is inline and only talks to this listener.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'")
	h.Set("Referrer-Policy", "no-referrer")
	http.ServeContent(w, r, "dashboard.html", time.Time{}, bytes.NewReader(dashboardHTML))
}

// guard refuses a request without the token: 401, with the scheme named
// so a client knows what to send.
func (o Options) guard(h http.Handler) http.Handler {
	want := []byte(o.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.URL.Query().Get(TokenParam)
		if a, ok := bearer(r.Header.Get("Authorization")); ok {
			got = a
		}
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="busbar"`)
			http.Error(w, "busbar: this needs the token in the broker's data directory (docs/operations.md#access)", http.StatusUnauthorized)
			return
		}
		if o.Authenticated != nil {
			o.Authenticated(r)
		}
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// bearer returns the credentials of an "Authorization: Bearer …" header.
// The scheme is case-insensitive (RFC 9110, section 11.1): "bearer" and
// "BEARER" are taken too.
func bearer(header string) (string, bool) {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(cred), true
}

// ReloadResult is ReloadPath's answer: the file reloaded, or why not.
type ReloadResult struct {
	File  string `json:"file"`
	Error string `json:"error,omitempty"`
}

// reload answers 200 with the file reloaded, or 422 with why it was
// refused.
func (o Options) reload(w http.ResponseWriter, _ *http.Request) {
	file, err := o.ReloadPrincipals()
	res := ReloadResult{File: file}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		res.Error = err.Error()
		w.WriteHeader(http.StatusUnprocessableEntity)
	}
	writeJSON(w, res)
}

// ready answers 200 "ready", or 503 with the reason.
func (o Options) ready(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := o.notReady(); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

func (o Options) notReady() error {
	if err := o.Broker.Ready(); err != nil {
		return err
	}
	if o.DataDir == "" {
		return nil
	}
	return probeWrite(o.DataDir)
}

// probeWrite writes, syncs and removes a file in dir: what the state and
// relay stores need of their directory.
func probeWrite(dir string) error {
	f, err := os.CreateTemp(dir, ".ready-*")
	if err != nil {
		return fmt.Errorf("the data directory cannot be written: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString("ready\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("the data directory cannot be written: %w", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
