package auth

import "errors"

// Sentinel errors. Functions wrap them with detail; test with errors.Is.
var (
	// ErrBadChannel: a channel name fails ValidChannel / ValidControlChannel.
	ErrBadChannel = errors.New("auth: invalid channel name")
	// ErrBadPattern: a channel or node pattern fails its syntax check.
	ErrBadPattern = errors.New("auth: invalid channel pattern")
	// ErrBadCredentials: unknown principal, wrong secret or bad signature.
	// All three look identical to the client so it cannot probe which
	// principals exist; Reason recovers the detail for server logs.
	ErrBadCredentials = errors.New("auth: bad credentials")
	// ErrNodeNotAllowed: credentials are fine but the principal may not
	// claim the requested node name.
	ErrNodeNotAllowed = errors.New("auth: node name not allowed")
	// ErrBadNodeName: the node name is not a valid DNS-style label.
	ErrBadNodeName = errors.New("auth: invalid node name")
	// ErrInsecureFile: a file holding secrets (or secret hashes) is
	// readable or writable by group or others.
	ErrInsecureFile = errors.New("auth: insecure file permissions")
)

// credError is a bad-credentials error whose text never varies, carrying
// the real reason separately so only the server log sees it.
type credError struct{ reason string }

func (e *credError) Error() string { return ErrBadCredentials.Error() }
func (e *credError) Unwrap() error { return ErrBadCredentials }

func badCredentials(reason string) error { return &credError{reason: reason} }

// Reason returns the server-side detail of a bad-credentials error returned
// by Store.Authenticate (e.g. "unknown principal"), or "" if err carries
// none. Log it; never send it to the client.
func Reason(err error) string {
	var ce *credError
	if errors.As(err, &ce) {
		return ce.reason
	}
	return ""
}

// clip shortens untrusted input before it is quoted into an error message,
// so a hostile client cannot blow up log lines.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
