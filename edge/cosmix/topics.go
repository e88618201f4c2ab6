package cosmix

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/edge"
	"busbar/wire"
)

// Topics: noded's topic.publish, topic.subscribe and topic.unsubscribe
// (the calls SupervisedClient makes), on busbar channels. A topic NAME is
// the channel TopicNamespace:NAME; a publication is a busbar publish on it
// whose payload is the published frame with noded's reserved headers set,
// and each subscription is a busbar subscription of the connection's
// node. The last frame of each topic is retained by the server, for the
// subscribers that come later.

// TopicNamespace is the channel namespace of topics.
const TopicNamespace = "cosmix-topic"

// Limits of topics (docs/cosmix.md#topics).
const (
	// MaxSnapshotBytes bounds a published frame, as noded's
	// MAX_SNAPSHOT_BYTES (1 MiB).
	MaxSnapshotBytes = 1 << 20
	// MaxRetainedBytes bounds the retained frames of all topics together;
	// a publication that does not fit is delivered, not retained, and
	// answered rc 5 "not_retained".
	MaxRetainedBytes = 64 << 20
	// MaxTopics bounds the topics the server keeps a sequence number and
	// a retained frame for; a publication to one more topic is delivered,
	// with seq 0, and answered rc 5 "not_retained".
	MaxTopics = 65536
	// MaxTopicSubscriptions bounds one connection's topic subscriptions;
	// one more is refused rc 10. It is the broker's registrations per
	// connection, less the handler and subscription of CallChannel.
	MaxTopicSubscriptions = broker.DefaultMaxRegistrations - 2
)

// The headers noded reserves on a topic delivery (subscription.rs's
// RESERVED_HEADERS): a publisher's own are removed, and the broker's
// broker_origin, topic and topic_seq set; the origin headers
// (originHeaders) are removed in any spelling, as noded's stamp does.
var topicHeaders = []string{"topic", "topic_seq", "topic_stale", "topic_op", "broker_origin", "broker_peer", "broker_service", "mesh_from"}

// retained is the last frame of each topic published here.
type retained struct {
	mu     sync.Mutex
	topics map[string]*topicState
	bytes  int
}

type topicState struct {
	seq       uint64
	wire      []byte // nil when nothing is retained
	publisher string // who published last: a service name or a node address
}

// topicChannel is the channel of topic name, or the reason it has none.
func topicChannel(name string) (string, error) {
	ch := TopicNamespace + ":" + name
	if err := auth.ValidChannel(ch); err != nil {
		return "", fmt.Errorf("topic name '%s' is not a busbar channel path (lower-case letters, digits, '.', '_', '-')", name)
	}
	return ch, nil
}

// topic answers topic.publish, topic.subscribe and topic.unsubscribe.
func (s *session) topic(ctx context.Context, m *wire.Message) *wire.Message {
	id, cmd := m.Value(wire.HeaderID), m.Value(wire.HeaderCommand)
	if cmd == "topic.list" {
		return s.listTopics(ctx, id, m.Value("prefix"))
	}
	name := m.Value("name")
	if name == "" {
		return nodedReply(id, cmd, wire.RCError, cmd+" requires 'name' header")
	}
	if cmd == "topic.publish" && strings.HasPrefix(name, "$") {
		return topicError(id, cmd, `{"error": "reserved_name"}`)
	}
	ch, err := topicChannel(name)
	if err != nil {
		return nodedReply(id, cmd, wire.RCError, err.Error())
	}
	switch cmd {
	case "topic.publish":
		return s.publish(ctx, m, name, ch)
	case "topic.subscribe":
		return s.subscribeTopic(ctx, id, name, ch)
	case "topic.subscriber_count":
		return s.countSubscribers(ctx, id, ch)
	case "topic.clear":
		return s.clearTopic(ctx, id, name, ch, m.Value("notify") != "false")
	default:
		return s.unsubscribeTopic(id, name)
	}
}

func topicError(id, cmd, body string) *wire.Message {
	resp := nodedReply(id, cmd, wire.RCError, "")
	resp.SetBody([]byte(body))
	return resp
}

// publish delivers the frame in the body to the topic's subscribers and,
// unless "retain: false", keeps it for later ones.
func (s *session) publish(ctx context.Context, m *wire.Message, name, ch string) *wire.Message {
	id, cmd := m.Value(wire.HeaderID), m.Value(wire.HeaderCommand)
	body := m.Body()
	if len(body) > MaxSnapshotBytes {
		return topicError(id, cmd, fmt.Sprintf(`{"error": "payload_too_large", "limit": %d}`, MaxSnapshotBytes))
	}
	inner, err := wire.Parse(body)
	if err != nil {
		return topicError(id, cmd, `{"error": "malformed_payload"}`)
	}
	for _, h := range topicHeaders {
		inner.Del(h)
	}
	stripStamped(inner) // a publisher's claim is neither delivered nor retained
	retain := m.Value("retain") != "false"
	r := &s.srv.topics
	r.mu.Lock()
	st := r.topics[name]
	if st == nil && len(r.topics) < MaxTopics {
		st = &topicState{}
		r.topics[name] = st
	}
	var seq uint64
	if st != nil {
		st.seq++
		seq = st.seq
		st.publisher = s.publisher()
	}
	r.mu.Unlock()
	stampOrigin(inner)
	inner.Set("topic", name)
	inner.Set("topic_seq", strconv.FormatUint(seq, 10))
	frame := Encode(inner)

	res, err := s.scope.Channel(ch).Publish(ctx, frame)
	if errors.Is(err, client.ErrPayloadTooLarge) { // the broker's --max-payload is below the frame
		resp := topicError(id, cmd, `{"error": "payload_too_large"}`)
		resp.Set(wire.HeaderError, oneLine(err.Error()))
		return resp
	}
	if err != nil {
		return nodedReply(id, cmd, wire.RCError, "topic.publish: "+err.Error())
	}
	kept := !retain
	if retain && st != nil {
		r.mu.Lock()
		switch {
		case st.seq != seq: // a later publication is the one to keep
			kept = true
		case r.bytes-len(st.wire)+len(frame) <= MaxRetainedBytes:
			r.bytes += len(frame) - len(st.wire)
			st.wire, kept = frame, true
		}
		r.mu.Unlock()
	}
	delivered := 0
	for _, nr := range res.Results {
		if nr.Result == wire.Accepted {
			delivered++
		}
	}
	resp := nodedReply(id, cmd, wire.RCSuccess, "")
	if !kept {
		resp = nodedReply(id, cmd, wire.RCWarning, "")
		resp.SetBody(fmt.Appendf(nil, `{"seq": %d, "delivered": %d, "warning": "not_retained"}`, seq, delivered))
		return resp
	}
	resp.SetBody(fmt.Appendf(nil, `{"seq": %d, "delivered": %d}`, seq, delivered))
	return resp
}

// subscribeTopic subscribes the connection's node to the topic's channel
// and hands it the retained frame, if any.
func (s *session) subscribeTopic(ctx context.Context, id, name, ch string) *wire.Message {
	cmd := "topic.subscribe"
	s.mu.Lock()
	_, have := s.subs[name]
	full := len(s.subs) >= MaxTopicSubscriptions
	s.mu.Unlock()
	if !have {
		if full {
			return nodedReply(id, cmd, wire.RCError, fmt.Sprintf("topic.subscribe: %d topic subscriptions on this connection already (the limit)", MaxTopicSubscriptions))
		}
		sub, err := s.scope.Channel(ch).Subscribe(ctx, func(_ context.Context, bm *client.Message) {
			s.enqueueRaw(topicDelivery(name, bm.Payload()))
		})
		if err != nil {
			return nodedReply(id, cmd, wire.RCError, "topic.subscribe: "+err.Error())
		}
		s.mu.Lock()
		s.subs[name] = sub
		s.mu.Unlock()
	}
	r := &s.srv.topics
	r.mu.Lock()
	var snapshot []byte
	var seq uint64
	if st := r.topics[name]; st != nil {
		snapshot, seq = st.wire, st.seq
	}
	r.mu.Unlock()
	resp := nodedReply(id, cmd, wire.RCSuccess, "")
	body, _ := wire.JSON(s.bc.Node() + "::topic::" + name)
	resp.SetBody(fmt.Appendf(nil, `{"subscription_id": %s, "replayed": %t, "seq": %d}`, body, snapshot != nil, seq))
	s.enqueue(resp)
	if snapshot != nil {
		s.enqueueRaw(topicDelivery(name, snapshot)) // as a live delivery is made
	}
	return nil
}

// unsubscribeTopic ends the connection's subscription to the topic.
func (s *session) unsubscribeTopic(id, name string) *wire.Message {
	s.mu.Lock()
	sub := s.subs[name]
	delete(s.subs, name)
	s.mu.Unlock()
	if sub != nil {
		sub.Close()
	}
	resp := nodedReply(id, "topic.unsubscribe", wire.RCSuccess, "")
	resp.SetBody([]byte("{}"))
	return resp
}

// topicDelivery is what a subscriber gets, live or replayed from the
// retained frame: the published frame as it is when it came through a
// cosmix connection (it has the topic headers), else a busbar node's
// payload as the body of an event frame; never a stamped header
// (stampedHeaders).
func topicDelivery(name string, payload []byte) []byte {
	if m, rep, err := wire.ParseLenient(payload); err == nil && m.Value("topic") == name {
		// A busbar node's frame may carry a claim, or a line the parse
		// skipped ("broker_principal:{}"): such a frame travels as parsed.
		// Origin headers it wrote are the broker's, as noded's rule has it:
		// a frame with any (a cosmix publisher's has broker_origin: local)
		// gets noded's stamp in their place.
		forged := !originStamped(m)
		if forged {
			stampOrigin(m)
		}
		if stripStamped(m) || !rep.Clean() || forged {
			return Encode(m)
		}
		return payload
	}
	m := wire.Empty().WithHeader(wire.HeaderType, wire.TypeEvent).WithHeader(wire.HeaderCommand, name).
		WithHeader("topic", name).WithBody(payload)
	return Encode(m)
}

// originStamped reports whether m's origin headers are none, or exactly
// noded's stamp (broker_origin: local, as the adapter publishes).
func originStamped(m *wire.Message) bool {
	n := 0
	for k, v := range m.Headers() {
		for _, h := range originHeaders {
			if strings.EqualFold(k, h) {
				if k != originHeader || v != originLocal {
					return false
				}
				n++
			}
		}
	}
	return n <= 1
}

// enqueueRaw queues an encoded frame with no deadline.
func (s *session) enqueueRaw(b []byte) bool { return s.enqueueFrame(b, time.Time{}) }

// enqueueFrame queues an encoded frame, or drops it (counted, here and in
// the server's Dropped).
func (s *session) enqueueFrame(b []byte, deadline time.Time) bool {
	if s.w.Queue(edge.Frame{Bytes: b, Deadline: deadline}) {
		return true
	}
	s.dropped.Add(1)
	if s.srv != nil {
		s.srv.dropped.Add(1)
	}
	return false
}

// publisher names this connection as a topic's last publisher.
func (s *session) publisher() string {
	if name := s.serviceName(); name != "" {
		return name
	}
	return s.bc.Addr()
}
