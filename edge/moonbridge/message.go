package moonbridge

import (
	"fmt"
	"unicode/utf8"
)

// ValidChannel reports whether name is a MoonBridge channel:
// namespace:path, each side a non-empty run of [a-z0-9_.-] starting with
// [a-z0-9], at most MaxChannelBytes bytes.
func ValidChannel(name string) bool {
	if len(name) == 0 || len(name) > MaxChannelBytes {
		return false
	}
	colon := -1
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == ':':
			if colon >= 0 {
				return false
			}
			colon = i
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
		case c == '_' || c == '.' || c == '-':
			if i == 0 || i == colon+1 {
				return false
			}
		default:
			return false
		}
	}
	return colon > 0 && colon < len(name)-1
}

// ValidBackendName reports whether name can be an endpoint's backend
// name: 1..MaxNodeBytes bytes of UTF-8, not blank (Java's trim, bytes up
// to ' ', would leave something).
func ValidBackendName(name string) bool {
	if len(name) == 0 || len(name) > MaxNodeBytes || !utf8.ValidString(name) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] > ' ' {
			return true
		}
	}
	return false
}

// check applies Message's invariants (MoonBridge's Message constructor).
func (m *Message) check() error {
	switch {
	case m.Kind < KindEvent || m.Kind > KindReply:
		return fmt.Errorf("unknown message kind %d", m.Kind)
	case !ValidChannel(m.Channel):
		return fmt.Errorf("invalid channel %q", clip(m.Channel))
	case m.Kind == KindReply && m.ReplyTo == nil:
		return fmt.Errorf("a reply needs reply-to")
	case m.Kind != KindReply && m.ReplyTo != nil:
		return fmt.Errorf("only a reply has reply-to")
	case m.Kind != KindEvent && m.Target == nil:
		return fmt.Errorf("a %s needs a target", m.Kind)
	case len(m.Payload) > MaxPayloadBytes:
		return fmt.Errorf("payload of %d bytes exceeds %d", len(m.Payload), MaxPayloadBytes)
	}
	for _, e := range []*Endpoint{&m.Source, m.Target} {
		if e != nil && !e.Proxy && !ValidBackendName(e.Backend) {
			return fmt.Errorf("invalid backend name %q", clip(e.Backend))
		}
	}
	return nil
}

func (w *writer) endpoint(e Endpoint) {
	w.boolean(e.Proxy)
	if !e.Proxy {
		w.str(e.Backend)
	}
}

func (w *writer) message(m *Message) {
	w.uuid(m.ID)
	w.u8(byte(m.Kind))
	w.str(m.Channel)
	w.endpoint(m.Source)
	w.boolean(m.Target != nil)
	if m.Target != nil {
		w.endpoint(*m.Target)
	}
	w.boolean(m.ReplyTo != nil)
	if m.ReplyTo != nil {
		w.uuid(*m.ReplyTo)
	}
	w.i32(int32(len(m.Payload)))
	w.b = append(w.b, m.Payload...)
}

func (r *reader) endpoint(what string) Endpoint {
	if r.boolean(what) {
		return ProxyEndpoint()
	}
	name := r.str(what, 1, MaxNodeBytes)
	if r.err == nil && !ValidBackendName(name) {
		r.fail("%s: blank backend name", what)
	}
	return BackendEndpoint(name)
}

func (r *reader) message() Message {
	var m Message
	m.ID = r.uuid("message id")
	m.Kind = Kind(r.u8("kind"))
	if r.err == nil && (m.Kind < KindEvent || m.Kind > KindReply) {
		r.fail("unknown message kind %d", m.Kind)
	}
	m.Channel = r.str("channel", 1, MaxChannelBytes)
	m.Source = r.endpoint("source")
	if r.boolean("target present") {
		t := r.endpoint("target")
		m.Target = &t
	}
	if r.boolean("reply-to present") {
		u := r.uuid("reply-to")
		m.ReplyTo = &u
	}
	n := r.i32("payload length")
	if r.err == nil && (n < 0 || n > MaxPayloadBytes) {
		r.fail("payload length %d outside 0..%d", n, MaxPayloadBytes)
	}
	m.Payload = append([]byte{}, r.take(int(n), "payload")...)
	if r.err == nil {
		if err := m.check(); err != nil {
			r.fail("%v", err)
		}
	}
	return m
}

// EncodeMessage encodes f. A reply cannot travel in a MESSAGE.
func EncodeMessage(f MessageFrame) ([]byte, error) {
	switch {
	case f.OperationID <= 0:
		return nil, fmt.Errorf("moonbridge: operation id %d is not positive", f.OperationID)
	case f.TimeoutMillis < MinTimeoutMillis || f.TimeoutMillis > MaxTimeoutMillis:
		return nil, fmt.Errorf("moonbridge: timeout %d ms outside %d..%d", f.TimeoutMillis, MinTimeoutMillis, MaxTimeoutMillis)
	case f.Message.Kind == KindReply:
		return nil, fmt.Errorf("moonbridge: a reply cannot be sent as a message")
	}
	if err := f.Message.check(); err != nil {
		return nil, fmt.Errorf("moonbridge: %w", err)
	}
	w := newWriter(TypeMessage, 64+len(f.Message.Payload))
	w.i64(f.OperationID)
	w.i64(f.TimeoutMillis)
	w.message(&f.Message)
	return w.frame()
}

// DecodeMessage decodes a MESSAGE frame.
func DecodeMessage(frame []byte) (MessageFrame, error) {
	var f MessageFrame
	r, err := newReader(frame, TypeMessage)
	if err != nil {
		return f, err
	}
	f.OperationID = r.i64("operation id")
	if r.err == nil && f.OperationID <= 0 {
		r.fail("operation id %d is not positive", f.OperationID)
	}
	f.TimeoutMillis = r.i64("timeout")
	if r.err == nil && (f.TimeoutMillis < MinTimeoutMillis || f.TimeoutMillis > MaxTimeoutMillis) {
		r.fail("timeout %d ms outside %d..%d", f.TimeoutMillis, MinTimeoutMillis, MaxTimeoutMillis)
	}
	f.Message = r.message()
	if r.err == nil && f.Message.Kind == KindReply {
		r.fail("a reply cannot be sent as a message")
	}
	return f, r.end()
}

// EncodeResponse encodes p.
func EncodeResponse(p Response) ([]byte, error) {
	if p.OperationID <= 0 {
		return nil, fmt.Errorf("moonbridge: operation id %d is not positive", p.OperationID)
	}
	w := newWriter(TypeResponse, 32)
	w.i64(p.OperationID)
	w.u8(byte(p.Type))
	switch p.Type {
	case ResponseSend:
		if p.Result < Accepted || p.Result > Failed {
			return nil, fmt.Errorf("moonbridge: unknown send result %d", p.Result)
		}
		w.u8(byte(p.Result))
	case ResponseReply:
		if p.Reply == nil || p.Reply.Kind != KindReply {
			return nil, fmt.Errorf("moonbridge: a reply response needs a reply message")
		}
		if err := p.Reply.check(); err != nil {
			return nil, fmt.Errorf("moonbridge: %w", err)
		}
		w.message(p.Reply)
	case ResponsePublish:
		if len(p.Results) > MaxPublishResults {
			return nil, fmt.Errorf("moonbridge: %d publish results exceed %d", len(p.Results), MaxPublishResults)
		}
		w.uuid(p.MessageID)
		w.u16(len(p.Results))
		seen := make(map[Endpoint]bool, len(p.Results))
		for _, nr := range p.Results {
			if seen[nr.Endpoint] || (!nr.Endpoint.Proxy && !ValidBackendName(nr.Endpoint.Backend)) || nr.Result < Accepted || nr.Result > Failed {
				return nil, fmt.Errorf("moonbridge: bad or duplicate publish result for %s", nr.Endpoint)
			}
			seen[nr.Endpoint] = true
			w.endpoint(nr.Endpoint)
			w.u8(byte(nr.Result))
		}
	case ResponseError:
		if p.Err.Code < CodeNotConnected || p.Err.Code > CodeProtocolError {
			return nil, fmt.Errorf("moonbridge: unknown error code %d", p.Err.Code)
		}
		w.u8(byte(p.Err.Code))
		w.str(TruncateDetail(p.Err.Detail))
	default:
		return nil, fmt.Errorf("moonbridge: unknown response type %d", p.Type)
	}
	return w.frame()
}

// TruncateDetail cuts an error detail to MaxDetailBytes on a rune
// boundary, as MoonBridge's client does before it sends one.
func TruncateDetail(s string) string {
	if len(s) <= MaxDetailBytes {
		return s
	}
	end := MaxDetailBytes
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end]
}

// DecodeResponse decodes a RESPONSE frame.
func DecodeResponse(frame []byte) (Response, error) {
	var p Response
	r, err := newReader(frame, TypeResponse)
	if err != nil {
		return p, err
	}
	p.OperationID = r.i64("operation id")
	if r.err == nil && p.OperationID <= 0 {
		r.fail("operation id %d is not positive", p.OperationID)
	}
	p.Type = ResponseType(r.u8("response type"))
	if r.err != nil {
		return p, r.err
	}
	switch p.Type {
	case ResponseSend:
		p.Result = r.sendResult("send result")
	case ResponseReply:
		m := r.message()
		if r.err == nil && m.Kind != KindReply {
			r.fail("response message is not a reply")
		}
		p.Reply = &m
	case ResponsePublish:
		p.MessageID = r.uuid("publish message id")
		n := r.u16("publish result count")
		if r.err == nil && n > MaxPublishResults {
			r.fail("%d publish results exceed %d", n, MaxPublishResults)
		}
		seen := make(map[Endpoint]bool)
		for i := 0; i < n && r.err == nil; i++ {
			nr := NodeResult{Endpoint: r.endpoint("publish endpoint"), Result: r.sendResult("publish result")}
			if r.err == nil && seen[nr.Endpoint] {
				r.fail("duplicate publish endpoint %s", nr.Endpoint)
			}
			seen[nr.Endpoint] = true
			p.Results = append(p.Results, nr)
		}
	case ResponseError:
		p.Err.Code = ErrorCode(r.u8("error code"))
		if r.err == nil && (p.Err.Code < CodeNotConnected || p.Err.Code > CodeProtocolError) {
			r.fail("unknown error code %d", p.Err.Code)
		}
		p.Err.Detail = r.str("error detail", 0, MaxDetailBytes)
	default:
		r.fail("unknown response type %d", p.Type)
	}
	return p, r.end()
}

func (r *reader) sendResult(what string) SendResult {
	v := SendResult(r.u8(what))
	if r.err == nil && (v < Accepted || v > Failed) {
		r.fail("%s: unknown code %d", what, v)
	}
	return v
}

// Decode decodes any frame by its type: a Hello, Register, Registered,
// MessageFrame or Response, or the type byte itself for the empty frames.
func Decode(frame []byte) (any, error) {
	if len(frame) < 1 || len(frame) > MaxFrameBytes {
		return nil, fmt.Errorf("%w: %d", ErrFrameSize, len(frame))
	}
	switch t := frame[0]; t {
	case TypeHello:
		return DecodeHello(frame)
	case TypeRegister:
		return DecodeRegister(frame)
	case TypeRegistered:
		return DecodeRegistered(frame)
	case TypeHeartbeat, TypePong, TypeGoodbye:
		return t, DecodeEmpty(frame, t)
	case TypeMessage:
		return DecodeMessage(frame)
	case TypeResponse:
		return DecodeResponse(frame)
	default:
		return nil, malformed(t, "unknown frame type")
	}
}

// clip shortens a peer-supplied string for an error or a log line.
func clip(s string) string {
	if len(s) > 64 {
		for i := 64; i > 0; i-- {
			if utf8.RuneStart(s[i]) {
				return s[:i] + "…"
			}
		}
	}
	return s
}
