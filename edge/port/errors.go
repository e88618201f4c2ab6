package port

import (
	"errors"
	"fmt"

	"busbar/wire"
)

// Error is an application error: a reply whose rc is wire.RCError or
// more, as CallPort returns it. A command returns one to choose its rc: an
// RC below wire.RCError is a warning (the call succeeds, Text travels in
// the "error" header beside the body).
type Error struct {
	RC   wire.RC
	Text string
}

func (e *Error) Error() string { return fmt.Sprintf("port: rc %d: %s", e.RC, e.Text) }

// TransportError is a call that got no reply it could read: the port is
// not there, the connection failed or timed out, or the reply was not a
// frame. It is never an application error.
type TransportError struct {
	Op   string // "dial", "write", "read" or "reply"
	Path string
	Err  error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("port %s: %s: %v", e.Path, e.Op, e.Err)
}

// Unwrap returns the cause, so errors.Is(err, os.ErrDeadlineExceeded) and
// errors.Is(err, context.Canceled) work through it.
func (e *TransportError) Unwrap() error { return e.Err }

// Timeout reports whether the call failed because a deadline passed.
func (e *TransportError) Timeout() bool {
	var ne interface{ Timeout() bool }
	return errors.As(e.Err, &ne) && ne.Timeout()
}

// Sentinel errors.
var (
	// ErrNoReply: the port closed the connection without a reply (cosmix
	// ports do this on a request they cannot parse).
	ErrNoReply = errors.New("port closed the connection without a reply")
	// ErrServerClosed is what Serve returns once Close was called.
	ErrServerClosed = errors.New("port: server closed")
	// ErrBadName: a port name outside the grammar (see ValidName).
	ErrBadName = errors.New("port: bad name")
	// ErrPortInUse: Listen found a live port at the path.
	ErrPortInUse = errors.New("port: already served")
	// ErrUnsafeDir: the ports directory can be reached by other users.
	ErrUnsafeDir = errors.New("port: directory is not private")
)

// refuse writes a refusal of reason, answered r, to the door's refusal
// log, under the caller's source (host: "" for a local caller, the node
// address of a bus caller).
func (s *Server) refuse(reason, host string, r Reply) {
	s.cfg.Door.Refusals.Warn("port: refused a request: "+reason, host, "port", s.cfg.Name, "reason", reason, "error", r.Error)
}
