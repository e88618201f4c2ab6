package durable

import (
	"context"
	"errors"

	"busbar/client"
	"busbar/seal"
	"busbar/wire"
)

// NewClientRelay is the relay a device reaches over a busbar client
// connection: the broker's relay role
// (docs/durable.md#the-relay-on-the-broker-connection). A push the relay
// refuses becomes a *RefusedError with the relay's code; any other
// failure (a timeout, a lost connection) is temporary. It is a LiveRelay:
// over a client that reconnects, Serve follows the connection.
func NewClientRelay(c *client.Client) Relay { return clientRelay{c} }

func (r clientRelay) Connected() bool { return r.c.Connected() }

func (r clientRelay) WaitUp(ctx context.Context) error {
	err := r.c.WaitConnected(ctx)
	if rv := VersionUnsupported(err); rv != nil {
		return rv
	}
	return err
}

func (r clientRelay) Notify(f func(up bool)) (stop func()) {
	return r.c.NotifyConn(func(ev client.ConnEvent) {
		switch ev.Kind {
		case client.Disconnected:
			f(false)
		case client.Reconnected:
			f(true)
		}
	})
}

type clientRelay struct{ c *client.Client }

// relayCodes are the broker results that are relay refusals.
var relayCodes = map[wire.Result]string{
	wire.ResultTooLarge:    CodeTooLarge,
	wire.ResultMalformed:   CodeMalformed,
	wire.ResultInboxFull:   CodeInboxFull,
	wire.ResultRateLimited: CodeRateLimited,
	wire.ResultUnavailable: CodeUnavailable,
	wire.ResultInternal:    CodeInternal,
	wire.ResultOverload:    CodeUnavailable, // too many pushes open on the connection: retry
}

func (r clientRelay) Push(ctx context.Context, blob []byte) (uint64, error) {
	seq, err := r.c.DurablePush(ctx, blob)
	return seq, refusal(err)
}

// PushAll pipelines the pushes on the client's connection
// (client.DurablePipe).
func (r clientRelay) PushAll(ctx context.Context, blobs [][]byte) []PushResult {
	out := make([]PushResult, len(blobs))
	for i, p := range r.c.DurablePushAll(ctx, blobs) {
		out[i] = PushResult{Seq: p.Seq, Err: refusal(p.Err)}
	}
	return out
}

// refusal turns the relay's refusal into a *RefusedError; any other error
// is returned as it is.
func refusal(err error) error {
	var re *client.RequestError
	if errors.As(err, &re) {
		if code, ok := relayCodes[re.Kind]; ok {
			return &RefusedError{Code: code}
		}
	}
	return err
}

func (r clientRelay) Receive(ctx context.Context, me *seal.Identity) (Session, error) {
	s, err := r.c.DurableReceive(ctx, me)
	if err != nil {
		return nil, err
	}
	// The session lives as long as ctx: the client then takes a new one.
	context.AfterFunc(ctx, s.Close)
	return clientSession{s}, nil
}

type clientSession struct{ s *client.DurableSession }

func (s clientSession) Next(ctx context.Context) (uint64, []byte, error) {
	b, err := s.s.Next(ctx)
	return b.Seq, b.Blob, sessionError(err)
}

func (s clientSession) Ack(ctx context.Context, seq uint64) error {
	return sessionError(s.s.Ack(ctx, seq))
}

// sessionError is a session's error as Serve reads it: a takeover the
// relay told of, whether Next or an Ack met it first, is ErrTakenOver.
func sessionError(err error) error {
	if errors.Is(err, client.ErrDurableTakenOver) {
		return ErrTakenOver
	}
	return err
}
