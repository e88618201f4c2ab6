package client

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"log/slog"
	"net"
	"runtime"
	"time"

	"busbar/auth"
)

// Defaults for Options.
const (
	DefaultTimeout          = 30 * time.Second // a call with no context deadline
	DefaultDispatchQueue    = 1024             // callbacks waiting for a worker
	DefaultMaxQueueBytes    = 8 << 20          // outbound bytes queued
	DefaultMaxQueueMessages = 65536            // outbound messages queued
	DefaultWriteTimeout     = 10 * time.Second
	handshakeTimeout        = 10 * time.Second // when ctx has no deadline
)

// Options configure Connect.
type Options struct {
	// Server is the broker's endpoint: unix:///path, tcp://host:port or
	// tls://host:port. Ignored when Dial is set.
	Server string
	// Dial, when set, makes the connection (e.g. Broker.DialInProcess).
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
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}
