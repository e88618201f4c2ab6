package cosmix

// topic.subscriber_count, topic.list and topic.clear: what the bus
// directory and the retained frames say of topics.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"busbar/wire"
)

// subscribers counts, per channel, the nodes subscribed to it.
func (s *session) subscribers(ctx context.Context) (map[string]int, error) {
	nodes, err := s.bc.Directory(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, n := range nodes {
		for _, ch := range n.Subscriptions {
			out[ch]++
		}
	}
	return out, nil
}

// countSubscribers answers topic.subscriber_count: the nodes subscribed.
func (s *session) countSubscribers(ctx context.Context, id, ch string) *wire.Message {
	counts, err := s.subscribers(ctx)
	if err != nil {
		return nodedReply(id, "topic.subscriber_count", wire.RCFailure, "topic.subscriber_count: "+err.Error())
	}
	resp := nodedReply(id, "topic.subscriber_count", wire.RCSuccess, "")
	resp.SetBody(fmt.Appendf(nil, `{"count": %d}`, counts[ch]))
	return resp
}

// topicInfo is one element of topic.list's answer, in noded's order.
type topicInfo struct {
	Name          string  `json:"name"`
	Subscribers   int     `json:"subscribers"`
	HasSnapshot   bool    `json:"has_snapshot"`
	SnapshotSeq   uint64  `json:"snapshot_seq"`
	SnapshotSize  int     `json:"snapshot_size"`
	LastPublisher *string `json:"last_publisher"`
	Stale         bool    `json:"stale"`
}

// listTopics answers topic.list: the topics published here or subscribed
// to anywhere, those starting with prefix when it is given, by name.
func (s *session) listTopics(ctx context.Context, id, prefix string) *wire.Message {
	counts, err := s.subscribers(ctx)
	if err != nil {
		return nodedReply(id, "topic.list", wire.RCFailure, "topic.list: "+err.Error())
	}
	byName := map[string]*topicInfo{}
	for ch, n := range counts {
		if name, ok := strings.CutPrefix(ch, TopicNamespace+":"); ok {
			byName[name] = &topicInfo{Name: name, Subscribers: n}
		}
	}
	r := &s.srv.topics
	r.mu.Lock()
	for name, st := range r.topics {
		ti := byName[name]
		if ti == nil {
			ti = &topicInfo{Name: name}
			byName[name] = ti
		}
		if st.wire != nil {
			ti.HasSnapshot, ti.SnapshotSeq, ti.SnapshotSize = true, st.seq, len(st.wire)
		}
		if st.publisher != "" {
			p := st.publisher
			ti.LastPublisher = &p
		}
	}
	r.mu.Unlock()
	out := make([]*topicInfo, 0, len(byName))
	for name, ti := range byName {
		if strings.HasPrefix(name, prefix) {
			out = append(out, ti)
		}
	}
	slices.SortFunc(out, func(a, b *topicInfo) int { return strings.Compare(a.Name, b.Name) })
	body, err := wire.JSON(out)
	if err != nil {
		return nodedReply(id, "topic.list", wire.RCFailure, "topic.list: "+err.Error())
	}
	resp := nodedReply(id, "topic.list", wire.RCSuccess, "")
	resp.SetBody(body)
	return resp
}

// clearTopic answers topic.clear: the retained frame is dropped and, with
// notify, the subscribers get noded's delete notice.
func (s *session) clearTopic(ctx context.Context, id, name, ch string, notify bool) *wire.Message {
	r := &s.srv.topics
	r.mu.Lock()
	st := r.topics[name]
	had := st != nil && st.wire != nil
	var seq uint64
	if had {
		r.bytes -= len(st.wire)
		st.wire, seq = nil, st.seq
	}
	r.mu.Unlock()
	delivered := 0
	if had && notify {
		notice := wire.Empty().WithHeader(wire.HeaderCommand, "ui.noop").WithHeader("topic", name).
			WithHeader("topic_op", "delete").WithHeader("topic_seq", strconv.FormatUint(seq, 10))
		res, err := s.scope.Channel(ch).Publish(ctx, Encode(notice))
		if err != nil {
			return nodedReply(id, "topic.clear", wire.RCError, "topic.clear: "+err.Error())
		}
		for _, nr := range res.Results {
			if nr.Result == wire.Accepted {
				delivered++
			}
		}
	}
	resp := nodedReply(id, "topic.clear", wire.RCSuccess, "")
	resp.SetBody(fmt.Appendf(nil, `{"delivered": %d}`, delivered))
	return resp
}
