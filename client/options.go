package client

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"time"

	"busbar/auth"
	"busbar/transport"
)

// Defaults for Options.
const (
	DefaultTimeout          = 30 * time.Second // a call with no context deadline
	DefaultDispatchQueue    = 1024             // callbacks waiting for a worker
	DefaultMaxQueueBytes    = 8 << 20          // outbound bytes queued
	DefaultMaxQueueMessages = 65536            // outbound messages queued
	DefaultWriteTimeout     = 10 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second

	// DefaultReconnectWaitMin and DefaultReconnectWaitMax bound the wait
	// between passes over the server list while reconnecting: it doubles
	// from the first to the second (docs/client.md#reconnecting).
	DefaultReconnectWaitMin = 100 * time.Millisecond
	DefaultReconnectWaitMax = 2 * time.Second
	// NoRefusedRetry is Options.RefusedRetry for a Connect that returns
	// the broker's first refusal.
	NoRefusedRetry time.Duration = -1
	// DefaultMaxReconnects is Options.MaxReconnects when it is 0: the
	// dial attempts per outage before the client ends (as nats.go's
	// default; with one server and the default waits, about two minutes).
	DefaultMaxReconnects = 60
	// ReconnectForever, as Options.MaxReconnects, never gives up.
	ReconnectForever = -1
	// NoReconnect, as Options.MaxReconnects, makes no attempt: a lost
	// connection ends the client (Done, Err).
	NoReconnect = -2
)

// Options configure Connect.
type Options struct {
	// Server is the broker's endpoint: unix:///path, tcp://host:port or
	// tls://host:port, or several separated by commas. Servers adds more;
	// Connect tries them in order (Server's first) and reconnecting goes
	// round them. Ignored when Dial is set.
	Server  string
	Servers []string
	// Dial, when set, makes every connection, the reconnects' too (e.g.
	// Broker.DialInProcess).
	Dial func(ctx context.Context) (net.Conn, error)
	// TLS configures tls:// endpoints.
	TLS *tls.Config

	// Node is the node name this process registers as.
	Node string
	// IID is this instance's id (wire.ValidIID), unique among live
	// connections; the broker makes one up when it is empty. Two
	// instances may announce the same service name, never share an IID.
	IID string
	// Credential is the principal and secret to present. For a public-key
	// principal set Credential.Principal and PrivateKey instead.
	Credential auth.Credential
	PrivateKey ed25519.PrivateKey

	// Executor runs callbacks. Default: a pool of Workers goroutines fed by
	// a queue of DispatchQueue callbacks (the node's bounded handler
	// dispatch).
	Executor      Executor
	Workers       int // default GOMAXPROCS, at least 2
	DispatchQueue int

	// DefaultTimeout bounds calls whose context has no deadline.
	DefaultTimeout time.Duration
	// MaxQueueBytes and MaxQueueMessages bound the outbound queue; a call
	// that does not fit fails at once (BACKPRESSURED, OVERLOAD).
	MaxQueueBytes, MaxQueueMessages int
	WriteTimeout                    time.Duration
	// HandshakeTimeout bounds a dial and handshake when Connect's ctx has
	// no deadline, and each reconnect attempt (default
	// DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration

	// MaxReconnects is how many dial attempts the client makes, per
	// outage, to get a connection back when it loses one: 0 means
	// DefaultMaxReconnects (60); ReconnectForever never gives up;
	// NoReconnect makes none, so the client ends with the connection
	// (Done, Err). Any other negative value is refused by Connect. While
	// reconnecting the client keeps its subscriptions, handlers,
	// announcements and watches and restores them on the new connection
	// (docs/client.md#reconnecting).
	MaxReconnects int
	// RefusedRetry is how long Connect keeps trying again, waiting as
	// between reconnect passes, while the brokers refuse the connection
	// for a reason that passes (ErrRefused: at capacity, too many
	// connections logging in): 0 means until ctx's deadline, or
	// HandshakeTimeout when it has none; NoRefusedRetry (any negative
	// value) returns the first refusal.
	RefusedRetry time.Duration
	// ReconnectWaitMin and ReconnectWaitMax bound the wait between passes
	// over the server list (defaults DefaultReconnectWaitMin and
	// DefaultReconnectWaitMax); each wait is drawn between half the
	// current bound and the bound, so clients of one broker do not all
	// come back at once. A maximum below the minimum is raised to it.
	ReconnectWaitMin, ReconnectWaitMax time.Duration
	// OnConnEvent, when set, is told when the connection is lost, when it
	// is back, and when the client has ended (ConnEvent). It runs on the
	// client's reconnecting goroutine, one event at a time, in order: the
	// client waits for it, so it must return promptly, and it must not
	// call Close (it may start `go c.Close()`).
	OnConnEvent func(ConnEvent)

	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Workers <= 0 {
		o.Workers = max(2, runtime.GOMAXPROCS(0))
	}
	if o.DispatchQueue <= 0 {
		o.DispatchQueue = DefaultDispatchQueue
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = DefaultTimeout
	}
	if o.MaxQueueBytes <= 0 {
		o.MaxQueueBytes = DefaultMaxQueueBytes
	}
	if o.MaxQueueMessages <= 0 {
		o.MaxQueueMessages = DefaultMaxQueueMessages
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.ReconnectWaitMin <= 0 {
		o.ReconnectWaitMin = DefaultReconnectWaitMin
	}
	if o.ReconnectWaitMax <= 0 {
		o.ReconnectWaitMax = DefaultReconnectWaitMax
	}
	o.ReconnectWaitMax = max(o.ReconnectWaitMax, o.ReconnectWaitMin)
	if o.MaxReconnects == 0 {
		o.MaxReconnects = DefaultMaxReconnects
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// checkReconnects refuses a MaxReconnects that is neither a count nor
// one of the two named values.
func (o *Options) checkReconnects() error {
	if o.MaxReconnects < NoReconnect {
		return fmt.Errorf("client: MaxReconnects %d: give a count, ReconnectForever (%d) or NoReconnect (%d)", o.MaxReconnects, ReconnectForever, NoReconnect)
	}
	return nil
}

// endpoints is the server list: Server's entries, then Servers'. With
// Dial set it is one empty entry (Dial decides where to go).
func (o *Options) endpoints() ([]string, error) {
	if o.Dial != nil {
		return []string{""}, nil
	}
	var out []string
	for _, s := range append(strings.Split(o.Server, ","), o.Servers...) {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if _, err := transport.ParseEndpoint(s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("client: no server given (Options.Server, Servers or Dial)")
	}
	return out, nil
}

// reconnectWait is the wait before pass (1, 2, …) over the server list:
// ReconnectWaitMin doubled pass-1 times, at most ReconnectWaitMax, of
// which a random part in [bound/2, bound] is taken.
func (o *Options) reconnectWait(pass int) time.Duration {
	bound := o.ReconnectWaitMax
	if shift := pass - 1; shift < 32 && o.ReconnectWaitMin<<shift < bound && o.ReconnectWaitMin<<shift > 0 {
		bound = o.ReconnectWaitMin << shift
	}
	half := bound / 2
	return half + rand.N(bound-half+1)
}
