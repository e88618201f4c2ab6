package broker

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"busbar/auth"
	"busbar/edge"
	"busbar/wire"
)

// handshake runs the opening exchange under HandshakeTimeout: bus.info
// from the broker, bus.hello from the client, then a welcome or an error and
// a close. Only an authenticated connection is registered.
func (b *Broker) handshake(c *conn, r *wire.Reader) error {
	_ = c.nc.SetReadDeadline(time.Now().Add(b.opts.HandshakeTimeout))
	nonce := make([]byte, 32)
	_, _ = rand.Read(nonce)
	c.nonce = nonce
	info, _ := json.Marshal(wire.Info{Broker: b.opts.Name, Protocol: wire.ProtocolVersion, Min: wire.ProtocolMin, Max: wire.ProtocolMax, Nonce: nonce})
	c.enqueue(wire.New(wire.TypeEvent, wire.CmdInfo).WithHeader(wire.HeaderBus, wire.ProtocolVersion).WithBody(info), time.Time{})

	m, err := r.ReadMessage()
	// A peer that sent its hello is no longer idle: it leaves the pool of
	// connections logging in, where only the idle make room for others.
	b.handshakeDone(c)
	switch {
	case err == nil:
	case errors.Is(err, wire.ErrTooLarge):
		b.answer(c, subject{kind: kindFrame}, fatal(wire.ResultTooLarge, "handshake: "+err.Error()+" (a hello may be at most "+strconv.Itoa(MaxHelloBytes)+" bytes)"))
		return err
	case errors.Is(err, wire.ErrMalformed):
		b.answer(c, subject{kind: kindFrame}, fatal(wire.ResultMalformed, "handshake: "+err.Error()))
		return err
	case errors.Is(err, os.ErrDeadlineExceeded):
		edge.CountClosed("bus", edge.ReasonLoginTimeout)
		c.closeWith(wire.ResultTimeout, "handshake: no hello within "+b.opts.HandshakeTimeout.String())
		return err
	default: // the peer left, or was closed to make room
		c.close(wire.ResultDisconnect)
		return err
	}
	// A refused hello is answered, and the connection closed.
	s := subject{kind: kindHello, id: helloID(m)}
	fail := func(res wire.Result, format string, args ...any) error {
		err := fmt.Errorf(format, args...)
		b.answer(c, s, refuse(res, err.Error()))
		return err
	}
	if m.Value(wire.HeaderCommand) != wire.CmdHello || m.Value(wire.HeaderType) != wire.TypeRequest {
		return fail(wire.ResultMalformed, "handshake: first frame must be a %s request", wire.CmdHello)
	}
	if v := m.Value(wire.HeaderBus); v != wire.ProtocolVersion {
		return fail(wire.ResultVersion, "incompatible protocol version %q: this broker speaks %q", v, wire.ProtocolVersion)
	}
	var hello wire.Hello
	if err := json.Unmarshal(m.Body(), &hello); err != nil {
		return fail(wire.ResultMalformed, "handshake: hello body: %v", err)
	}
	perms, err := b.authenticate(c, hello, nonce)
	if err != nil {
		b.stats.refused.Add(1)
		return fail(wire.ResultAuth, "%v", err)
	}
	if err := checkAdvertise(hello.Advertise); err != nil {
		return fail(wire.ResultMalformed, "handshake: %v", err)
	}
	iid := hello.IID
	if iid == "" {
		iid = newIID()
	} else if err := wire.ValidIID(iid); err != nil {
		return fail(wire.ResultMalformed, "handshake: %v", err)
	}
	_ = c.nc.SetReadDeadline(time.Time{})

	c.mu.Lock() // the writer may log the node name concurrently
	c.node, c.addr, c.perms = hello.Node, hello.Node+".bus", perms
	c.iid, c.principal, c.advertised = iid, hello.Principal, hello.Advertise
	if c.as != nil {
		c.principal = c.as.Name
	}
	c.capped = perms != nil && !perms.AllChannels()
	c.mu.Unlock()
	welcome := wire.Welcome{
		Node: c.node, IID: iid, Broker: b.opts.Name,
		HeartbeatMS: b.opts.HeartbeatInterval.Milliseconds(), LeaseMS: b.opts.LeaseTimeout.Milliseconds(),
		MaxPayload: b.opts.MaxPayload, MaxInflight: b.opts.MaxInflight,
	}
	// Queue the welcome before registering, so it precedes anything routed
	// to the node.
	reply := wire.New(wire.TypeResponse, wire.CmdHello).WithHeader(wire.HeaderBus, wire.ProtocolVersion).WithHeader(wire.HeaderRC, "0")
	if s.id != "" {
		reply.Set(wire.HeaderReplyTo, s.id)
	}
	old, err := b.dir.register(c, func(epoch uint64) {
		welcome.Epoch = epoch
		body, _ := json.Marshal(welcome)
		c.enqueue(reply.WithBody(body), time.Time{})
	})
	if err != nil {
		return fail(wire.ResultRejected, "handshake: %v", err)
	}
	if old != nil {
		b.retire(old)
	}
	b.bus.claim(c)
	return nil
}

// checkAdvertise accepts a hello's advertised address: at most
// wire.MaxAdvertiseLen bytes of printable ASCII.
func checkAdvertise(s string) error {
	if len(s) > wire.MaxAdvertiseLen {
		return fmt.Errorf("advertised address of %d bytes, more than %d", len(s), wire.MaxAdvertiseLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return fmt.Errorf("advertised address: byte %d is not printable ASCII", i)
		}
	}
	return nil
}

// newIID makes up an instance id for a client that brought none.
func newIID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// helloID is the id a hello response replies to: none when the hello's
// is unusable.
func helloID(req *wire.Message) string {
	if id := req.Value(wire.HeaderID); validID(id) {
		return id
	}
	return ""
}

// authenticate checks the hello's credential and node name. In-process
// connections are trusted; only they may take the broker's own name.
func (b *Broker) authenticate(c *conn, h wire.Hello, nonce []byte) (*auth.Permissions, error) {
	if err := auth.ValidNodeName(h.Node); err != nil {
		return nil, err
	}
	if c.inproc && c.as == nil {
		return nil, nil
	}
	if h.Node == b.opts.Name {
		return nil, fmt.Errorf("%w: %q is the broker's own name", auth.ErrNodeNotAllowed, h.Node)
	}
	if b.bus.isPeer(h.Node) {
		return nil, errPeerName(h.Node)
	}
	if c.as != nil { // authenticated at the edge; its principal still decides
		if !c.as.MayClaim(h.Node) {
			return nil, fmt.Errorf("%w: principal %q may not claim node %q", auth.ErrNodeNotAllowed, c.as.Name, h.Node)
		}
		return &c.as.Permissions, nil
	}
	if b.opts.Auth == nil {
		return nil, errors.New("broker: no authenticator configured")
	}
	p, err := b.opts.Auth.Authenticate(auth.Credential{Principal: h.Principal, Secret: h.Secret, Signature: h.Signature}, h.Node, nonce)
	if err != nil {
		b.refusals.Warn("authentication refused", remoteHost(c.nc), "node", clip(h.Node), "principal", clip(h.Principal), "reason", auth.Reason(err))
		return nil, err
	}
	return &p.Permissions, nil
}
