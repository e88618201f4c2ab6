package cosmix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/edge/port"
	"busbar/wire"
)

// CallChannel is the busbar channel every cosmix connection handles and
// subscribes to: a call (request) or a fire-and-forget message (event) for
// the app, its payload a CallRequest. A cosmix service is announced with
// this one channel, so a busbar node calls it as
// `busbar req SERVICE cosmix:call '{"command":"greet","args":{...}}'`.
const CallChannel = "cosmix:call"

// noded is the broker's own target name.
const noded = "noded"

// CallRequest is the payload on CallChannel: a cosmix request without its
// routing headers. Args is the body when it is JSON, Body when it is not;
// Headers are the frame's other headers; To is the caller's "to" as it
// wrote it (a <sub>.<service>.<node>.bus keeps its sub label for the
// service). Reply "frame" asks for the app's whole response frame as the
// reply payload of a success (rc below 10), so a warning's rc 5 and text
// and the response's other headers travel between cosmix apps; without
// it the payload is the response's body. From is the caller's registered
// cosmix service; the receiving side believes it only when the calling
// node announces that service, and otherwise names the caller by its node
// address.
type CallRequest struct {
	Command string            `json:"command"`
	From    string            `json:"from,omitempty"`
	To      string            `json:"to,omitempty"`
	Reply   string            `json:"reply,omitempty"`
	Args    json.RawMessage   `json:"args,omitempty"`
	Body    *string           `json:"body,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Native is the calling native connection's voucher (vouch.go): the
	// callee's session, native too, stamps the caller's broker_principal
	// when it redeems it.
	Native string `json:"native,omitempty"`
	// Type is the caller's "type" as it wrote it ("event" for a
	// NodedClient send_raw of an event), which noded forwards unchanged;
	// without it the app gets "type: request".
	Type string `json:"type,omitempty"`
}

// replyFrame is CallRequest.Reply asking for the whole response frame.
const replyFrame = "frame"

// routing headers are not copied into CallRequest.Headers: the broker and
// the adapters set them.
var routing = []string{wire.HeaderCommand, wire.HeaderError, wire.HeaderFrom, wire.HeaderID, wire.HeaderRC, wire.HeaderTo, wire.HeaderType}

// route is where a frame's "to" leads.
type route struct {
	local   bool   // noded itself
	target  string // the busbar target
	service string // the service named, if any
	node    string // the node named, when it is not the broker's own
	err     string // the reply when "to" leads nowhere
}

// resolve reads "to" as noded does: "noded", <node>.bus and
// <sub>.noded.<node>.bus are the broker; a bare name, and an address of
// the broker's own node (<service>.<broker>.bus, <sub>.<service>.<broker>.bus),
// a service looked up by its name; another node's address that node's
// (a busbar node's, or the service at its address; unknownNode says when
// there is no such node); a valid cross-mesh form is refused, and any
// other "to" with a dot or an "@" is an invalid target.
func (s *session) resolve(to string) route {
	if to == noded {
		return route{local: true}
	}
	if local, fqdn, ok := strings.Cut(to, "@"); ok {
		if _, err := wire.ParseAddress(local); err == nil && validMeshFQDN(fqdn) {
			return route{err: fmt.Sprintf("cross-mesh routing not implemented: '%s'", to)}
		}
		return route{err: invalidTarget(to)}
	}
	if !strings.Contains(to, ".") {
		return route{target: to, service: to}
	}
	a, err := wire.ParseAddress(to)
	if err != nil {
		return route{err: invalidTarget(to)}
	}
	if a.Node == s.srv.cfg.BrokerName {
		if a.Service == "" || a.Service == noded {
			return route{local: true}
		}
		return route{target: a.Service, service: a.Service}
	}
	if a.Service == noded {
		return route{local: true, node: a.Node}
	}
	return route{target: a.String(), service: a.Service, node: a.Node}
}

func invalidTarget(to string) string { return fmt.Sprintf("Invalid Bus target: '%s'", to) }

// unknownMeshNode is noded's refusal of an address on a node it has no
// route to.
func unknownMeshNode(node string) string { return fmt.Sprintf("Unknown mesh node: '%s'", node) }

// MaxAddressLen bounds a whole target, cross-mesh form included, as
// cosmix-lib-bus's MAX_ADDRESS_LEN (busbar's wire.MaxAddressLen bounds
// its local part the same).
const MaxAddressLen = 253

// validMeshFQDN is cosmix-lib-bus's rule for the part of a cross-mesh
// target after its "@": at most MaxAddressLen bytes, at least one dot and
// no dot at the end, each label a valid address label not starting "xn--".
func validMeshFQDN(fqdn string) bool {
	if fqdn == "" || len(fqdn) > MaxAddressLen || !strings.Contains(fqdn, ".") || strings.HasSuffix(fqdn, ".") {
		return false
	}
	for l := range strings.SplitSeq(fqdn, ".") {
		if wire.ValidLabel(l) != nil || strings.HasPrefix(l, "xn--") {
			return false
		}
	}
	return true
}

// knownNode reports whether node is a node of the bus (a busbar node or
// a cosmix connection's), as noded asks its mesh routes; a failed look-up
// counts as known, so the call's own failure is answered.
func (s *session) knownNode(ctx context.Context, node string) bool {
	ctx, cancel := context.WithTimeout(ctx, nodedTimeout)
	defer cancel()
	nodes, err := s.bc.Directory(ctx)
	if err != nil {
		return true
	}
	return slices.ContainsFunc(nodes, func(n wire.NodeInfo) bool { return n.Node == node })
}

// start runs a call (or a fire-and-forget message, without id) on its own
// goroutine, at most MaxCalls at once.
func (s *session) start(m *wire.Message, r route) {
	id := m.Value(wire.HeaderID)
	select {
	case s.calls <- struct{}{}:
	default:
		if id != "" {
			s.enqueue(response(id, wire.RCFailure, fmt.Sprintf("too many calls in flight on this connection (%d)", s.srv.cfg.MaxCalls)))
		} else {
			s.dropped.Add(1)
			s.srv.dropped.Add(1)
		}
		return
	}
	s.wg.Go(func() {
		defer func() { <-s.calls }()
		if id == "" {
			s.send(m, r)
		} else {
			s.call(m, r)
		}
	})
}

// call makes a request and answers the app with its reply or the reason
// it has none.
func (s *session) call(m *wire.Message, r route) {
	ctx, cancel := context.WithTimeout(s.ctx, s.srv.cfg.CallTimeout)
	defer cancel()
	id, command := m.Value(wire.HeaderID), m.Value(wire.HeaderCommand)
	ch, payload, err := s.plan(ctx, m, r)
	var reply *client.Message
	if err == nil {
		reply, err = s.scope.Channel(ch).Request(ctx, r.target, payload)
	}
	if s.ctx.Err() != nil {
		return // the connection ended: nobody to answer
	}
	if err != nil {
		rc, text, fromService := failure(err, r, ctx)
		if !fromService && r.node != "" && s.ctx.Err() == nil && !s.knownNode(s.ctx, r.node) {
			rc, text = wire.RCError, unknownMeshNode(r.node)
		}
		resp := response(id, rc, text)
		if fromService {
			s.address(resp, command, r)
		}
		if rc.IsError() && json.Valid([]byte(text)) && strings.HasPrefix(text, "{") {
			resp.SetBody([]byte(text)) // a structured error body travels as the body too
		}
		s.enqueue(resp)
		return
	}
	resp := response(id, wire.RCSuccess, "")
	var stamp string
	if f, err := wire.Parse(reply.Payload()); ch == CallChannel && err == nil {
		if v := f.Value(vouchHeader); v != "" {
			f.Del(vouchHeader)
			if s.native {
				stamp = s.srv.redeem(v, reply.From())
			}
		}
		resp = response(id, wire.ResponseRC(f), f.Value(wire.HeaderError))
		for k, v := range f.Headers() {
			if !slices.Contains(routing, k) {
				resp.Set(k, v)
			}
		}
		resp.SetBody(f.Body())
		// noded forwards the app's own command header, or none.
		command = f.Value(wire.HeaderCommand)
	} else {
		resp.SetBody(reply.Payload())
	}
	s.address(resp, command, r)
	s.enqueueAs(resp, stamp, time.Time{})
}

// address sets a routed reply's command, from, to and broker_origin, as
// noded sets them on a correlated reply (its "to" the caller's service,
// none for an anonymous caller).
func (s *session) address(resp *wire.Message, command string, r route) {
	stampOrigin(resp)
	if command != "" {
		resp.Set(wire.HeaderCommand, command)
	}
	from := r.service
	if from == "" {
		from = r.target
	}
	resp.Set(wire.HeaderFrom, from)
	if name := s.serviceName(); name != "" {
		resp.Set(wire.HeaderTo, name)
	}
}

// failure is the reply to a call that failed: noded's rc and text where
// noded has one, and whether the service itself answered.
func failure(err error, r route, ctx context.Context) (rc wire.RC, text string, fromService bool) {
	svc := r.service
	if svc == "" {
		svc = r.target
	}
	var re *client.RequestError
	switch {
	case errors.As(err, &re):
		switch re.Kind {
		case wire.ResultHandler:
			return re.RC, re.Text, true
		case wire.ResultNoHandler:
			return wire.RCError, fmt.Sprintf("Service '%s' not found", svc), false
		case wire.ResultTimeout:
			return wire.RCFailure, fmt.Sprintf("Service '%s' timed out", svc), false
		case wire.ResultOverload:
			return wire.RCFailure, fmt.Sprintf("Service '%s' overloaded (%s)", svc, re.Text), false
		case wire.ResultDisconnect, wire.ResultShutdown, wire.ResultReplaced:
			return wire.RCError, fmt.Sprintf("Service '%s' disconnected", svc), false
		case wire.ResultAmbiguous:
			return wire.RCError, fmt.Sprintf("Service '%s' is ambiguous: %s", svc, re.Text), false
		default:
			return wire.RCError, fmt.Sprintf("Service '%s' refused the call: %s", svc, re.Text), false
		}
	case ctx.Err() != nil:
		return wire.RCFailure, fmt.Sprintf("Service '%s' timed out", svc), false
	case errors.Is(err, wire.ErrBadAddress):
		return wire.RCError, fmt.Sprintf("Service '%s' not found", svc), false
	default:
		return wire.RCError, err.Error(), false
	}
}

// send delivers a fire-and-forget message as a busbar event; when it
// reaches nobody the app gets noded's "not found" reply, without id.
func (s *session) send(m *wire.Message, r route) {
	ctx, cancel := context.WithTimeout(s.ctx, s.srv.cfg.CallTimeout)
	defer cancel()
	ch, payload, err := s.plan(ctx, m, r)
	var rcpt client.Receipt
	if err == nil {
		rcpt, err = s.scope.Channel(ch).Send(ctx, r.target, payload)
	}
	if s.ctx.Err() != nil {
		return
	}
	if err != nil || rcpt.Result == wire.NotConnected || rcpt.Result == wire.NoSubscriber {
		svc := r.service
		if svc == "" {
			svc = r.target
		}
		text := fmt.Sprintf("Service '%s' not found", svc)
		if r.node != "" && !s.knownNode(ctx, r.node) {
			text = unknownMeshNode(r.node)
		}
		s.enqueue(response("", wire.RCError, text))
	}
}

// plan chooses the channel and payload of a call: CallChannel and a
// CallRequest for a cosmix service (and for a target that announces
// nothing, when the command is not a channel name); the command as the
// channel and the body as the payload for a busbar service that handles
// that channel; a port's channel and port.BusRequest for a busbar port.
func (s *session) plan(ctx context.Context, m *wire.Message, r route) (string, []byte, error) {
	command := m.Value(wire.HeaderCommand)
	var channels []string
	if r.service != "" {
		if infos, err := s.bc.Whois(ctx, r.service); err == nil {
			for _, in := range infos {
				if r.target == r.service || in.Address == r.target || strings.HasSuffix(r.target, "."+in.Address) {
					channels = in.Channels
					break
				}
			}
		}
	}
	isChannel := auth.ValidChannel(command) == nil
	switch {
	case slices.Contains(channels, CallChannel):
	case isChannel && slices.Contains(channels, command):
		return command, m.Body(), nil
	case portChannel(channels) != "":
		args := json.RawMessage(m.Body())
		if len(args) > 0 && !json.Valid(args) {
			args, _ = wire.JSON(string(m.Body()))
		}
		b, err := wire.JSON(port.BusRequest{Command: command, Args: args})
		return portChannel(channels), b, err
	case channels == nil && isChannel:
		return command, m.Body(), nil
	}
	b, err := s.callPayload(m)
	return CallChannel, b, err
}

func portChannel(channels []string) string {
	for _, c := range channels {
		if strings.HasPrefix(c, "port:") {
			return c
		}
	}
	return ""
}

// callPayload is m as a CallRequest from this connection's service.
func (s *session) callPayload(m *wire.Message) ([]byte, error) {
	req := CallRequest{Command: m.Value(wire.HeaderCommand), From: s.serviceName(), To: m.Value(wire.HeaderTo), Reply: replyFrame,
		Native: s.srv.vouch(s), Type: m.Value(wire.HeaderType)}
	if body := m.Body(); len(body) > 0 {
		if json.Valid(body) {
			req.Args = json.RawMessage(body)
		} else {
			b := string(body)
			req.Body = &b
		}
	}
	for k, v := range m.Headers() {
		if !slices.Contains(routing, k) {
			if req.Headers == nil {
				req.Headers = map[string]string{}
			}
			req.Headers[k] = v
		}
	}
	return wire.JSON(req)
}

// validHeader reports whether k: v can travel in a frame.
func validHeader(k, v string) bool { return wire.Empty().WithHeader(k, v).Check() == nil }
