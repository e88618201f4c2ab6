package cosmix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"busbar/client"
	"busbar/wire"
)

// Registration-rejection body of a name collision (cosmix-lib-bus
// REGISTRATION_REJECTION_SCHEMA, REGISTRATION_REJECTION_NAME_TAKEN): newer
// clients classify the refusal from it.
const (
	rejectionSchema = "noded.registration-rejection.v1"
	nameTaken       = "NAME_TAKEN"
)

// nodedTimeout bounds the broker round trips of one noded command.
const nodedTimeout = DefaultCallTimeout

// pingBody is noded.ping's answer while no Unix socket is served: the
// extensions busbar provides of noded's: core, and topic (publish,
// subscribe, unsubscribe); no observe.
const pingBody = `{"pong": true, "extensions": {"core": "1.0", "topic": "1.0"}}`

// ping is noded.ping's answer: pingBody, and while the Unix socket is
// served the native-session profile and its endpoint, which
// cosmix-lib-client's connect_unix discovers over either transport and
// requires on the socket.
func (s *Server) ping() []byte {
	s.mu.Lock()
	ep := s.endpoint
	s.mu.Unlock()
	if ep == "" {
		return []byte(pingBody)
	}
	path, _ := wire.JSON(ep)
	return fmt.Appendf(nil, `{"pong": true, "extensions": {"core": "1.0", "native-session": %q, "native-session-endpoint": %s, "topic": "1.0"}}`, NativeSessionVersion, path)
}

// noded answers a frame addressed to the broker.
func (s *session) noded(m *wire.Message) {
	ctx, cancel := context.WithTimeout(s.ctx, nodedTimeout)
	defer cancel()
	id, cmd := m.Value(wire.HeaderID), m.Value(wire.HeaderCommand)
	var resp *wire.Message
	switch cmd {
	case "noded.register":
		resp = s.register(ctx, m)
	case "noded.deregister":
		resp = s.deregister(ctx, id)
	case "noded.list":
		resp = s.list(ctx, id)
	case "noded.info":
		resp = s.info(ctx, id)
	case "topic.publish", "topic.subscribe", "topic.unsubscribe", "topic.subscriber_count", "topic.list", "topic.clear":
		resp = s.topic(ctx, m)
		if resp == nil {
			return // answered, and the retained frame queued after it
		}
	case "ui.subscribe", "ui.unsubscribe":
		resp = s.uiSubscription(m)
	case "noded.ping":
		resp = nodedReply(id, cmd, wire.RCSuccess, "")
		resp.SetBody(s.srv.ping())
	default:
		resp = nodedReply(id, "", wire.RCError, fmt.Sprintf("Unknown noded command: '%s'", cmd))
	}
	if s.ctx.Err() == nil {
		s.enqueue(resp)
	}
}

// nodedReply is a reply from noded: type response, from noded, the rc,
// the command when there is one, the error when there is one, the id.
func nodedReply(id, cmd string, rc wire.RC, errText string) *wire.Message {
	m := response(id, rc, errText).WithHeader(wire.HeaderFrom, noded)
	if cmd != "" {
		m.Set(wire.HeaderCommand, cmd)
	}
	return m
}

// register binds the frame's "from" to this connection: a busbar service
// announced by the connection's node, with the provenance in its meta.
// A name another connection holds is refused rc 10 and the connection
// kept, as noded refuses it.
func (s *session) register(ctx context.Context, m *wire.Message) *wire.Message {
	id := m.Value(wire.HeaderID)
	name := m.Value(wire.HeaderFrom)
	if name == "" {
		return nodedReply(id, "", wire.RCError, "noded.register requires 'from' header")
	}
	if !validServiceName(name) {
		return nodedReply(id, "", wire.RCError, serviceNameRule)
	}
	if err := wire.ValidLabel(name); err != nil {
		return nodedReply(id, "", wire.RCError, fmt.Sprintf("service name '%s' is not a busbar service name: %s", name, labelReason(err)))
	}
	ann := wire.Announcement{Service: name, Channels: []string{CallChannel}}
	prov := json.RawMessage("{}")
	if body := m.Body(); len(body) > 0 {
		var p Provenance
		if json.Unmarshal(body, &p) == nil && json.Valid(body) && body[0] == '{' {
			prov = json.RawMessage(body) // else registered without it, as noded does
			if p.Version != nil && len(*p.Version) <= wire.MaxVersionLen {
				ann.Version = *p.Version
			}
		}
	}
	ann.Meta, _ = wire.JSON(map[string]json.RawMessage{metaKey: prov})
	if len(ann.Meta) > wire.MaxMetaBytes {
		ann.Meta, _ = wire.JSON(map[string]json.RawMessage{metaKey: json.RawMessage("{}")})
	}

	s.srv.regMu.Lock()
	defer s.srv.regMu.Unlock()
	infos, err := s.bc.Whois(ctx, name)
	if err != nil {
		return nodedReply(id, "", wire.RCFailure, "noded.register: "+err.Error())
	}
	for _, in := range infos {
		if in.Provenance.Node != s.bc.Node() {
			return taken(id, name)
		}
	}
	info, err := s.bc.Announce(ctx, ann)
	if err != nil {
		var re *client.RequestError
		if errors.As(err, &re) {
			return nodedReply(id, "", wire.RCError, "noded.register: "+re.Text)
		}
		return nodedReply(id, "", wire.RCFailure, "noded.register: "+err.Error())
	}
	if info.Collision { // a busbar node announced it meanwhile
		_ = s.bc.Withdraw(ctx, name)
		return taken(id, name)
	}
	s.mu.Lock()
	old := s.name
	s.name = name
	s.mu.Unlock()
	if old != "" && old != name {
		_ = s.bc.Withdraw(ctx, old)
	}
	resp := nodedReply(id, "noded.register", wire.RCSuccess, "")
	body, _ := wire.JSON(name)
	resp.SetBody([]byte(`{"registered": ` + string(body) + `}`))
	return resp
}

// MinServiceNameLen and MaxServiceNameLen bound a service name as noded's
// noded.register does (^[a-z][a-z0-9-]{1,30}$): 2 to 31 bytes.
const (
	MinServiceNameLen = 2
	MaxServiceNameLen = 31
)

// serviceNameRule is noded's refusal of a name outside its rule, word for
// word.
const serviceNameRule = "noded.register 'from' must match ^[a-z][a-z0-9-]{1,30}$"

// validServiceName is noded's rule for a registered name: a lower-case
// letter, then 1 to 30 lower-case letters, digits and "-". busbar's own
// rule (wire.ValidLabel: no "-" at the end) is checked after it.
func validServiceName(name string) bool {
	if len(name) < MinServiceNameLen || len(name) > MaxServiceNameLen || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := range len(name) {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// taken is noded's collision reply: rc 10, the error text, and the
// structured rejection body.
func taken(id, name string) *wire.Message {
	text := fmt.Sprintf("service name '%s' is already registered", name)
	resp := nodedReply(id, "", wire.RCError, text)
	body, _ := wire.JSON(map[string]string{"schema": rejectionSchema, "error_code": nameTaken, "message": text})
	resp.SetBody(body)
	return resp
}

func labelReason(err error) string {
	var ae *wire.AddressError
	if errors.As(err, &ae) {
		return ae.Reason
	}
	return err.Error()
}

// deregister withdraws the connection's service; without one it is rc 0
// too, as noded's.
func (s *session) deregister(ctx context.Context, id string) *wire.Message {
	s.mu.Lock()
	name := s.name
	s.name = ""
	s.mu.Unlock()
	resp := nodedReply(id, "noded.deregister", wire.RCSuccess, "")
	if name == "" {
		resp.SetBody([]byte(`{"deregistered": null}`))
		return resp
	}
	if err := s.bc.Withdraw(ctx, name); err != nil {
		return nodedReply(id, "", wire.RCFailure, "noded.deregister: "+err.Error())
	}
	body, _ := wire.JSON(name)
	resp.SetBody([]byte(`{"deregistered": ` + string(body) + `}`))
	return resp
}

// list answers with every service on the bus and every busbar node (a
// name a call reaches too), sorted by name.
func (s *session) list(ctx context.Context, id string) *wire.Message {
	out, err := s.inventory(ctx)
	if err != nil {
		return nodedReply(id, "", wire.RCFailure, "noded.list: "+err.Error())
	}
	body, err := wire.JSON(out)
	if err != nil {
		return nodedReply(id, "", wire.RCFailure, "noded.list: "+err.Error())
	}
	resp := nodedReply(id, "noded.list", wire.RCSuccess, "")
	resp.SetBody(body)
	return resp
}

// inventory is noded.list's records: the registry's services, then the
// nodes no service of that name hides, but for the cosmix connections'
// own nodes (their services are listed).
func (s *session) inventory(ctx context.Context) ([]ServiceInfo, error) {
	infos, err := s.bc.Whois(ctx, "")
	if err != nil {
		return nil, err
	}
	nodes, err := s.bc.Directory(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ServiceInfo, 0, len(infos)+len(nodes))
	named := map[string]bool{}
	for _, in := range infos {
		out = append(out, serviceInfo(in))
		named[in.Service] = true
	}
	for _, n := range nodes {
		if named[n.Node] || strings.HasPrefix(n.Node, s.srv.cfg.NodePrefix) {
			continue
		}
		out = append(out, nodeRecord(n))
	}
	slices.SortStableFunc(out, func(a, b ServiceInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// info answers with the broker's identity, as noded's NodeInfo.
func (s *session) info(ctx context.Context, id string) *wire.Message {
	infos, err := s.inventory(ctx)
	if err != nil {
		return nodedReply(id, "", wire.RCFailure, "noded.info: "+err.Error())
	}
	binary, version, pid := "busbar", s.srv.cfg.Version, uint32(os.Getpid())
	started := s.srv.started.UTC().Truncate(time.Second).Format(time.RFC3339)
	b := busbarBuild()
	self := &ServiceInfo{Name: noded, SchemaVersion: SchemaVersion,
		Provenance: Provenance{Binary: &binary, GitSHA: b.gitSHA, GitDirty: b.gitDirty, BuildTime: b.buildTime, PID: &pid, StartedAt: &started}}
	if version != "" {
		self.Version = &version
	}
	ni := NodeInfo{Node: s.srv.cfg.BrokerName, Noded: self,
		UptimeS: uint64(time.Since(s.srv.started) / time.Second), ServiceCount: serviceCount(len(infos)), SchemaVersion: SchemaVersion}
	s.srv.mu.Lock()
	if host := s.srv.bindHost; host != "" {
		ni.WgIP = &host
	}
	s.srv.mu.Unlock()
	body, err := wire.JSON(ni)
	if err != nil {
		return nodedReply(id, "", wire.RCFailure, "noded.info: "+err.Error())
	}
	resp := nodedReply(id, "noded.info", wire.RCSuccess, "")
	resp.SetBody(body)
	return resp
}

// uiSubscription answers ui.subscribe and ui.unsubscribe as noded does:
// accepted and never routed (noded's own stub: rc 5 on subscribe).
func (s *session) uiSubscription(m *wire.Message) *wire.Message {
	id, cmd := m.Value(wire.HeaderID), m.Value(wire.HeaderCommand)
	source, action := "", ""
	for line := range strings.Lines(string(m.Body())) {
		k, v, ok := strings.Cut(line, ":")
		switch k = strings.TrimSpace(k); {
		case !ok:
		case k == "source":
			source = strings.TrimSpace(v)
		case k == "action":
			action = strings.TrimSpace(v)
		}
	}
	if source == "" {
		return nodedReply(id, cmd, wire.RCError, cmd+" requires 'source' in body")
	}
	if cmd == "ui.unsubscribe" {
		resp := nodedReply(id, cmd, wire.RCSuccess, "")
		resp.SetBody([]byte("{}"))
		return resp
	}
	if action == "" {
		action = "*"
	}
	sub, _ := wire.JSON(s.publisher() + "::ui::" + source + "::" + action)
	resp := nodedReply(id, cmd, wire.RCWarning, "")
	resp.SetBody([]byte(`{"subscription_id": ` + string(sub) + `, "warning": "registered_but_not_routed"}`))
	return resp
}
