package moonbridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"busbar/auth"
	"busbar/edge"
	"busbar/wire"
)

// busNode is a backend's busbar connection, spoken at the wire level so
// that what busbar asks of the node (an event's receipt, a request's
// reply) is answered by the backend itself.
type busNode struct {
	nc  net.Conn
	r   *wire.Reader
	wmu sync.Mutex // one frame at a time

	mu   sync.Mutex
	ctl  map[string]chan *wire.Message // control calls waiting for their answer, by id
	once sync.Once
}

// ErrBusLogin wraps a refused busbar login.
var ErrBusLogin = errors.New("moonbridge: busbar refused the node's login")

// dialBus connects as p and logs in as node; it returns the node's epoch.
func dialBus(dial func(*auth.Principal) (net.Conn, error), p *auth.Principal, node, advertise string, timeout time.Duration) (*busNode, uint64, error) {
	nc, err := dial(p)
	if err != nil {
		return nil, 0, err
	}
	b := &busNode{nc: nc, r: wire.NewReader(nc), ctl: map[string]chan *wire.Message{}}
	epoch, err := b.login(p, node, advertise, timeout)
	if err != nil {
		nc.Close()
		return nil, 0, err
	}
	return b, epoch, nil
}

func (b *busNode) login(p *auth.Principal, node, advertise string, timeout time.Duration) (uint64, error) {
	_ = b.nc.SetDeadline(time.Now().Add(timeout))
	defer b.nc.SetDeadline(time.Time{})
	if _, err := b.r.ReadMessage(); err != nil { // bus.info: an in-process node needs no nonce
		return 0, err
	}
	body, _ := json.Marshal(wire.Hello{Node: node, Principal: p.Name, Advertise: advertise})
	hello := wire.New(wire.TypeRequest, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion).
		WithHeader(wire.HeaderID, NewUUID().String()).WithBody(body)
	if err := b.write(hello); err != nil {
		return 0, err
	}
	m, err := b.r.ReadMessage()
	if err != nil {
		return 0, err
	}
	if wire.ResponseRC(m).IsError() {
		return 0, fmt.Errorf("%w: %s: %s", ErrBusLogin, m.Value(wire.HeaderResult), m.Value(wire.HeaderError))
	}
	var w wire.Welcome
	if err := json.Unmarshal(m.Body(), &w); err != nil {
		return 0, fmt.Errorf("%w: welcome: %v", ErrBusLogin, err)
	}
	return w.Epoch, nil
}

// write sends one message to the broker.
func (b *busNode) write(m *wire.Message) error {
	frame, err := wire.AppendFrame(nil, m)
	if err != nil {
		return err
	}
	b.wmu.Lock()
	defer b.wmu.Unlock()
	_, err = b.nc.Write(frame)
	return err
}

func (b *busNode) close() { b.once.Do(func() { b.nc.Close() }) }

// control sends a bus.* request and waits for its answer.
func (b *busNode) control(cmd, body string, timeout time.Duration, done <-chan struct{}) (*wire.Message, error) {
	id := NewUUID().String()
	ch := make(chan *wire.Message, 1)
	b.mu.Lock()
	b.ctl[id] = ch
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.ctl, id)
		b.mu.Unlock()
	}()
	if err := b.write(wire.New(wire.TypeRequest, cmd).WithHeader(wire.HeaderID, id).WithBody([]byte(body))); err != nil {
		return nil, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case m := <-ch:
		return m, nil
	case <-t.C:
		return nil, fmt.Errorf("moonbridge: no answer to %s within %v", cmd, timeout)
	case <-done:
		return nil, errors.New("moonbridge: session ended")
	}
}

// answerControl hands a response to the control call waiting for it.
func (b *busNode) answerControl(m *wire.Message) bool {
	b.mu.Lock()
	ch := b.ctl[m.Value(wire.HeaderReplyTo)]
	b.mu.Unlock()
	if ch == nil {
		return false
	}
	ch <- m
	return true
}

// register subscribes the node to every channel its principal may
// receive (">": busbar then asks the backend about each event, and the
// backend answers NO_SUBSCRIBER itself), and registers it as the handler
// of each entry of the principal's handle list, a channel or a pattern
// (mb:ask, mb:*): MoonBridge's protocol never tells the proxy which
// channels a backend handles, and MoonBridge's proxy forwards any request
// on a channel the backend may receive, which the backend answers, or
// answers NO_HANDLER. busbar lets an edge's node handle a pattern for
// this; each request is still checked against the handle list.
func (ss *session) register() error {
	var calls [][2]string
	if len(ss.p.Permissions.Subscribe) > 0 {
		calls = append(calls, [2]string{wire.CmdSubscribe, ">"})
	}
	for _, pat := range ss.p.Permissions.Handle {
		if ch := string(pat); auth.ValidSubscription(ch) == nil {
			calls = append(calls, [2]string{wire.CmdHandle, ch})
		}
	}
	for _, c := range calls {
		m, err := ss.bus.control(c[0], c[1], ss.s.cfg.HandshakeTimeout, ss.done)
		if err != nil {
			return err
		}
		if wire.ResponseRC(m).IsError() {
			ss.s.door.Refusals.Warn("moonbridge: busbar refused a registration of the backend's node", edge.SourceHost(ss.nc.RemoteAddr()), "backend", ss.name,
				"command", c[0], "channel", c[1], "error", m.Value(wire.HeaderError))
		}
	}
	return nil
}

// readBus reads what the broker sends the node until the session ends.
func (ss *session) readBus() {
	for {
		m, err := ss.bus.r.ReadMessage()
		if err != nil {
			ss.close(fmt.Errorf("moonbridge: busbar connection: %w", err))
			return
		}
		switch m.Value(wire.HeaderType) {
		case wire.TypeResponse:
			if !ss.bus.answerControl(m) {
				ss.answerFromBus(m)
			}
		case wire.TypeEvent:
			switch cmd := m.Value(wire.HeaderCommand); {
			case cmd == wire.CmdGoodbye: // the broker is stopping: so is its proxy
				ss.goodbye()
			case cmd == wire.CmdError:
				ss.close(fmt.Errorf("moonbridge: busbar ended the node: %s %s", m.Value(wire.HeaderResult), m.Value(wire.HeaderError)))
				return
			case strings.HasPrefix(cmd, wire.ControlPrefix):
			default:
				ss.toBackend(m, KindEvent)
			}
		case wire.TypeRequest:
			ss.toBackend(m, KindRequest)
		case wire.TypeStream:
			ss.toBackend(m, 0)
		}
	}
}
