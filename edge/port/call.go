package port

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"busbar/wire"
)

// CallPort sends command with args (encoded as JSON; nil or null sends no
// body) to the port at path and returns its reply. An rc of wire.RCError
// or more returns the reply and an *Error whose text is the "error"
// header, else the body's "error" field, else the body. A call that gets
// no reply it can read returns a *TransportError. ctx bounds the whole
// call.
func CallPort(ctx context.Context, path, command string, args any) (*Reply, error) {
	var raw json.RawMessage
	if args != nil {
		var err error
		if raw, err = marshal(args); err != nil {
			return nil, fmt.Errorf("port: arguments: %w", err)
		}
	}
	req, err := encodeRequest(command, raw)
	if err != nil {
		return nil, err
	}
	data, err := exchange(ctx, path, req)
	if err != nil {
		return nil, err
	}
	return decodeReply(path, data)
}

// CallPortTyped is CallPort decoding the reply's body into a T (the zero
// T when there is none). A body that is not a T is a *TransportError
// (op "reply") with the reply still returned.
func CallPortTyped[T any](ctx context.Context, path, command string, args any) (T, *Reply, error) {
	var v T
	r, err := CallPort(ctx, path, command, args)
	if err != nil || len(r.Body) == 0 {
		return v, r, err
	}
	if err := json.Unmarshal(r.Body, &v); err != nil {
		return v, r, &TransportError{Op: "reply", Path: path, Err: fmt.Errorf("body is not a %T: %w", v, err)}
	}
	return v, r, nil
}

// exchange connects, writes req, shuts down the write side and reads the
// reply to its end.
func exchange(ctx context.Context, path string, req []byte) ([]byte, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, &TransportError{Op: "dial", Path: path, Err: err}
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	_, werr := conn.Write(req)
	if werr == nil {
		werr = conn.(*net.UnixConn).CloseWrite()
	}
	// Read even after a failed write: a port that refuses a request (too
	// large, busy) answers before reading all of it.
	var reply byteBudget                        // a caller reads one reply: no budget to share
	reply.give(MaxReplyBytes + MaxReplyBytes/2) // the last growth holds the old buffer and the new
	data, _, rerr := readAll(conn, MaxReplyBytes, &reply)
	if ctx.Err() != nil {
		return nil, &TransportError{Op: "read", Path: path, Err: context.Cause(ctx)}
	}
	if isTimeout(rerr) || isTimeout(werr) {
		// The socket's deadline is ctx's, which may pass a moment before
		// ctx's own timer fires.
		return nil, &TransportError{Op: "read", Path: path, Err: context.DeadlineExceeded}
	}
	switch {
	case len(bytes.TrimSpace(data)) > 0 && !errors.As(rerr, new(errTooLarge)):
		// A reply, even one followed by a reset: a port that closes with
		// part of the request unread resets the connection after its reply.
		return data, nil
	case rerr != nil:
		return nil, &TransportError{Op: "read", Path: path, Err: rerr}
	case werr != nil:
		return nil, &TransportError{Op: "write", Path: path, Err: werr}
	}
	return nil, &TransportError{Op: "read", Path: path, Err: ErrNoReply}
}

// decodeReply reads a reply frame by the PortReply rule.
func decodeReply(path string, data []byte) (*Reply, error) {
	m, err := wire.Parse(data) // a kept raw value (a JSON-shaped error text) is fine here
	if err != nil {
		return nil, &TransportError{Op: "reply", Path: path, Err: err}
	}
	r := &Reply{Error: m.Value(wire.HeaderError)}
	if body := bytes.TrimSpace(m.Body()); len(body) > 0 {
		r.Body = json.RawMessage(body)
	}
	if v, ok := m.Get(wire.HeaderRC); ok {
		rc, err := wire.ParseRC(v)
		if err != nil {
			return nil, &TransportError{Op: "reply", Path: path, Err: err}
		}
		r.RC = rc
	}
	if !r.RC.IsError() {
		return r, nil
	}
	return r, &Error{RC: r.RC, Text: errorText(r)}
}

// errorText is an application error's text: the error header, else the
// body's "error" field, else the body, else the rc alone.
func errorText(r *Reply) string {
	if r.Error != "" {
		return r.Error
	}
	var obj struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(r.Body, &obj) == nil && len(obj.Error) > 0 && string(obj.Error) != "null" {
		var s string
		if json.Unmarshal(obj.Error, &s) == nil {
			return s
		}
		return string(obj.Error)
	}
	if len(r.Body) > 0 {
		return string(r.Body)
	}
	return fmt.Sprintf("rc %d with no error text", r.RC)
}
