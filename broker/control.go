package broker

import (
	"encoding/json"
	"slices"
	"strconv"

	"busbar/auth"
	"busbar/internal/hotpath"
	"busbar/wire"
)

// control handles the bus.* commands a node addresses to the broker
// itself. Each is a request with an id; its handler answers success itself
// (some must answer under a lock, before any event that follows) and
// returns a refusal, which is answered here.
func (b *Broker) control(c *conn, v *hotpath.View, cmd string) {
	if cmd == wire.CmdReceipt {
		b.routeReceipt(c, v)
		return
	}
	m, err := v.Message()
	if err != nil { // cannot happen: the view parsed
		b.answer(c, subject{kind: kindFrame}, refuse(wire.ResultMalformed, err.Error()))
		return
	}
	cmd = m.Value(wire.HeaderCommand) // the message's own copy: cmd aliased the read buffer
	if cmd == wire.CmdDurableAck && m.Value(wire.HeaderType) == wire.TypeEvent {
		b.durableAckEvent(c, m) // an ack that wants no answer
		return
	}
	id := m.Value(wire.HeaderID)
	if !validID(id) || m.Value(wire.HeaderType) != wire.TypeRequest {
		b.answer(c, subject{kind: kindFrame}, refuse(wire.ResultMalformed, cmd+" must be a request with an id"))
		return
	}
	s := subject{kind: kindControl, id: id, command: cmd}
	if r := b.command(c, m, &s); r != nil {
		b.answer(c, s, r)
	}
}

// command runs one control command; on success it has answered. It
// names in s.topic what the command is about (a channel, a service, a
// namespace), for the log of a refusal.
func (b *Broker) command(c *conn, m *wire.Message, s *subject) *refusal {
	switch s.command {
	case wire.CmdSubscribe, wire.CmdUnsub, wire.CmdHandle, wire.CmdUnhandle:
		s.topic = string(m.Body())
		if r := b.register(c, s.command, s.topic, m.Value(wire.HeaderQueue)); r != nil {
			return r
		}
		b.bus.changed()
		b.reply(c, *s, nil)
	case wire.CmdDirectory:
		// The body may name one node; the answer must fit one message.
		nodes := b.Directory()
		if want := string(m.Body()); want != "" {
			nodes = slices.DeleteFunc(nodes, func(n wire.NodeInfo) bool { return n.Node != want })
		}
		return b.replyJSON(c, *s, nodes, "the directory", "ask for one node")
	case wire.CmdAnnounce:
		var a wire.Announcement
		if err := json.Unmarshal(m.Body(), &a); err != nil {
			return rejectf("announcement: %v", err)
		}
		s.topic = a.Service
		info, r := b.announce(c, a)
		if r != nil {
			return r
		}
		b.bus.changed()
		return b.replyJSON(c, *s, info, "the announcement", "")
	case wire.CmdWithdraw:
		s.topic = string(m.Body())
		if !b.withdraw(c, s.topic) {
			return rejectf("this connection announced no service %s", strconv.Quote(string(m.Body())))
		}
		b.bus.changed()
		b.reply(c, *s, nil)
	case wire.CmdWhois:
		return b.replyJSON(c, *s, b.services(string(m.Body())), "the registry", "ask for one service")
	case wire.CmdWatch:
		// The answer is queued under the registry's lock, before any event.
		b.reg.watch(c, func(now []wire.ServiceInfo) bool {
			if b.bus.joined() { // the bus's, as whois (the directory is not consulted under the registry's lock)
				now = withRemote(now, b.bus.remoteServices(), "", nil)
			}
			r := b.replyJSON(c, *s, now, "the registry", "")
			if r != nil {
				b.answer(c, *s, r)
			}
			return r == nil
		})
	case wire.CmdUnwatch:
		b.reg.unwatch(c)
		b.reply(c, *s, nil)
	case wire.CmdDurablePush, wire.CmdDurableReceive, wire.CmdDurableAck, wire.CmdDurableInbox:
		return b.durable(c, m, s)
	case wire.CmdTap, wire.CmdUntap:
		return b.tapControl(c, m, s)
	case wire.CmdStateSet, wire.CmdStateOpen, wire.CmdStateGet, wire.CmdStateWatch, wire.CmdStateUnwatch:
		return b.stateControl(c, m, s)
	case wire.CmdStateDrop, wire.CmdStateOwner:
		return b.stateAdmin(c, m, s)
	default:
		return rejectf("unknown control command %s", s.command)
	}
	return nil
}

// replyJSON answers s with v as JSON, or refuses when it would not fit
// one message (hint says what to ask for instead).
func (b *Broker) replyJSON(c *conn, s subject, v any, what, hint string) *refusal {
	body, r := b.fitAnswer(v, what, hint)
	if r != nil {
		return r
	}
	b.reply(c, s, body)
	return nil
}

// register records a subscription or handler after checking the receive
// permission, which is independent of the sending ones.
//
// A subscription may be a wildcard pattern (auth.ValidSubscription); it is
// accepted when one of the principal's subscribe patterns overlaps it, and
// then receives, message by message, only the channels the principal may
// receive (deliverStream, candidates). A handler is one channel. A
// subscription may be a queue's member (queue not ""; queues.go).
func (b *Broker) register(c *conn, cmd, channel, queue string) *refusal {
	if queue != "" {
		if r := b.checkQueue(cmd, queue); r != nil {
			return r
		}
	}
	set, action := c.subs, auth.ActionSubscribe
	if cmd == wire.CmdHandle || cmd == wire.CmdUnhandle {
		set, action = c.handles, auth.ActionHandle
	}
	// A handler is one channel, except for a node an edge adapter logs
	// in (DialInProcessAs): a protocol such as MoonBridge's never says
	// which channels its peer handles, so its node handles the patterns
	// its principal may handle, and each request is still checked
	// against the handle permission (deliverRequest).
	valid := auth.ValidChannel
	if action == auth.ActionSubscribe || c.as != nil {
		valid = auth.ValidSubscription
	}
	if err := valid(channel); err != nil {
		return rejectf("%v", err)
	}
	adding := cmd == wire.CmdSubscribe || cmd == wire.CmdHandle
	if adding && c.perms != nil && !c.perms.MayReceive(action, channel) {
		return rejectf("not permitted to %s on %s", action, channel)
	}
	pattern := action == auth.ActionSubscribe && auth.IsPattern(channel)
	c.mu.Lock()
	defer c.mu.Unlock()
	_, had := set[channel]
	if !adding {
		delete(set, channel)
		if action == auth.ActionSubscribe {
			b.dir.unsubscribe(c, channel)
			c.setQueueLocked(channel, "")
		}
		if had && pattern {
			c.pats--
		}
		if had && action == auth.ActionHandle && auth.IsPattern(channel) {
			c.hpats--
		}
		return nil
	}
	if !had && len(c.subs)+len(c.handles) >= b.opts.MaxRegistrations {
		return rejectf("too many registrations on this connection (limit %d)", b.opts.MaxRegistrations)
	}
	if action == auth.ActionSubscribe && had && c.queues[channel] != queue {
		return rejectf("%s is subscribed %s on this node already; unsubscribe first", channel, queueName(c.queues[channel]))
	}
	set[channel] = struct{}{}
	if !had && pattern {
		c.pats++
	}
	if !had && action == auth.ActionHandle && auth.IsPattern(channel) {
		c.hpats++
	}
	if action == auth.ActionSubscribe {
		c.setQueueLocked(channel, queue)
		b.dir.subscribe(c, channel)
	}
	return nil
}
