package cosmix

// Calls into a cosmix app: a busbar request or event on CallChannel,
// handed to the app as a cosmix request frame.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"busbar/client"
	"busbar/wire"
)

// answerCall is the handler of CallChannel: it hands the call to the app
// as a cosmix request and returns its response, an rc of 10 or more as a
// handler error with that rc.
func (s *session) answerCall(ctx context.Context, bm *client.Message) ([]byte, error) {
	name := s.serviceName()
	if name == "" {
		return nil, &client.HandlerError{RC: wire.RCError, Text: "no cosmix service is registered on this connection"}
	}
	frame, whole, stamp, err := s.incoming(ctx, bm, name)
	if err != nil {
		return nil, err
	}
	id, ch, ok := s.await()
	if !ok {
		return nil, &client.HandlerError{RC: wire.RCFailure, Text: fmt.Sprintf("Service '%s' overloaded (%d calls waiting)", name, s.srv.cfg.MaxCalls)}
	}
	defer s.forget(id)
	frame.Set(wire.HeaderID, id)
	deadline, _ := ctx.Deadline()
	if !s.enqueueAs(frame, stamp, deadline) {
		return nil, &client.HandlerError{RC: wire.RCFailure, Text: fmt.Sprintf("Service '%s' overloaded (outbound buffer full)", name)}
	}
	select {
	case r := <-ch:
		if rc := wire.ResponseRC(r); rc.IsError() {
			text := r.Value(wire.HeaderError)
			if text == "" {
				text = string(r.Body())
			}
			return nil, &client.HandlerError{RC: rc, Text: text}
		}
		if whole {
			// Only the session's own voucher, and only for a native caller.
			r.Del(vouchHeader)
			if stamp != "" {
				if v := s.srv.vouch(s); v != "" {
					r.Set(vouchHeader, v)
				}
			}
			return Encode(r), nil
		}
		return r.Body(), nil
	case <-s.ctx.Done():
		return nil, &client.HandlerError{RC: wire.RCError, Text: fmt.Sprintf("Service '%s' disconnected", name)}
	case <-ctx.Done(): // the caller's deadline: it hears rc 20, whoever is first
		return nil, &client.HandlerError{RC: wire.RCFailure, Text: fmt.Sprintf("Service '%s' timed out", name)}
	}
}

// takeEvent hands a fire-and-forget message to the app, without id.
func (s *session) takeEvent(ctx context.Context, bm *client.Message) {
	name := s.serviceName()
	if name == "" {
		return
	}
	if frame, _, stamp, err := s.incoming(ctx, bm, name); err == nil {
		s.enqueueAs(frame, stamp, time.Time{})
	}
}

// incoming is the cosmix request frame for a CallRequest payload,
// whether the caller wants the whole response frame back, and, for a
// native connection, the caller's principal when the caller is a native
// connection too (its voucher redeemed).
func (s *session) incoming(ctx context.Context, bm *client.Message, name string) (*wire.Message, bool, string, error) {
	var req CallRequest
	if err := json.Unmarshal(bm.Payload(), &req); err != nil || req.Command == "" {
		return nil, false, "", &client.HandlerError{RC: wire.RCFailure, Text: `want a JSON payload {"command": NAME, "args": ARGS}`}
	}
	m := wire.Empty()
	for k, v := range req.Headers {
		if !slices.Contains(routing, k) && validHeader(k, v) {
			m.Set(k, v)
		}
	}
	m.Set(wire.HeaderType, wire.TypeRequest)
	if req.Type != "" && validHeader(wire.HeaderType, req.Type) {
		m.Set(wire.HeaderType, oneLine(req.Type))
	}
	m.Set(wire.HeaderCommand, oneLine(req.Command))
	m.Set(wire.HeaderTo, name)
	if req.To != "" && validHeader(wire.HeaderTo, req.To) {
		m.Set(wire.HeaderTo, req.To)
	}
	if from := s.caller(ctx, req.From, bm.From()); from != "" {
		m.Set(wire.HeaderFrom, from)
	}
	stampOrigin(m)
	switch {
	case len(req.Args) > 0 && string(req.Args) != "null":
		m.SetBody(req.Args)
	case req.Body != nil:
		m.SetBody([]byte(*req.Body))
	}
	var stamp string
	if s.native {
		stamp = s.srv.redeem(req.Native, bm.From())
	}
	return m, req.Reply == replyFrame, stamp, nil
}

// caller names who called, as noded's "from" on a routed frame: the
// cosmix service it claims when its node announces that service; nobody
// ("", the frame has no "from", as noded removes an anonymous caller's)
// for a cosmix connection without one; else the busbar node's address.
func (s *session) caller(ctx context.Context, claimed, fromAddr string) string {
	node := strings.TrimSuffix(fromAddr, ".bus")
	anonymous := strings.HasPrefix(node, s.srv.cfg.NodePrefix)
	if claimed == "" {
		if anonymous {
			return ""
		}
		return fromAddr
	}
	infos, err := s.bc.Whois(ctx, claimed)
	if err == nil {
		for _, in := range infos {
			if in.Provenance.Node == node {
				return claimed
			}
		}
	}
	if anonymous {
		return ""
	}
	return fromAddr
}

// originHeaders are the headers noded stamps on what it routes
// (subscription.rs's broker_origin, broker_peer, broker_service,
// mesh_from): it removes them, in any spelling, from what a peer sent.
var originHeaders = []string{"broker_origin", "broker_peer", "broker_service", "mesh_from"}

// stampOrigin is noded's stamp on a routed request, send or correlated
// reply: the origin headers removed and "broker_origin: local" set, the
// sender being on this machine (busbar's cosmix listeners are loopback
// and the local socket).
func stampOrigin(m *wire.Message) {
	var found []string
	for k := range m.Headers() {
		for _, h := range originHeaders {
			if strings.EqualFold(k, h) {
				found = append(found, k)
				break
			}
		}
	}
	for _, k := range found {
		m.Del(k)
	}
	m.Set(originHeader, originLocal)
}

// originHeader and originLocal are noded's stamp on routed frames.
const (
	originHeader = "broker_origin"
	originLocal  = "local"
)
