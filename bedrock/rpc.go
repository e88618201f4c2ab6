package bedrock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// DefaultRPCTimeoutTicks is how long a call waits for its response.
const DefaultRPCTimeoutTicks = 100

// Request is the payload of a req: {method, params?}
// (docs/bedrock.md#the-protocol).
type Request struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Response is the payload of a res: {rid, ok, data?, err?}; rid is the
// request's message id.
type Response struct {
	RID  string          `json:"rid"`
	OK   bool            `json:"ok"`
	Data json.RawMessage `json:"data,omitempty"`
	Err  string          `json:"err,omitempty"`
}

// Method answers a request: the result (any JSON value, json.Marshal'd;
// a json.RawMessage as is), or an error whose text becomes err.
type Method func(params json.RawMessage, from *Envelope) (any, error)

// AsyncMethod answers a request later: it must call reply exactly once,
// from any goroutine. For methods that wait (on the network, say), so the
// bus's goroutine is not held up.
type AsyncMethod func(params json.RawMessage, from *Envelope, reply func(any, error))

// RPC is request/response over a Bus: methods this add-on serves, and
// calls to others (or to itself: loopback).
type RPC struct {
	bus     *Bus
	mu      sync.Mutex
	methods map[string]AsyncMethod
	calls   map[string]*call
	stops   []func()
}

type call struct {
	done   func(Response, error)
	cancel func()
}

// ErrRPCTimeout is a call that got no response within its timeout.
var ErrRPCTimeout = errors.New("bedrock: rpc timed out")

// RemoteError is a response with ok false.
type RemoteError struct{ Text string }

func (e *RemoteError) Error() string { return "bedrock: remote error: " + e.Text }

// NewRPC serves and calls methods on bus; Close unregisters it.
func NewRPC(bus *Bus) *RPC {
	r := &RPC{bus: bus, methods: map[string]AsyncMethod{}, calls: map[string]*call{}}
	r.stops = []func(){bus.On(TypeRequest, r.serve), bus.On(TypeResponse, r.answer)}
	return r
}

// Close stops serving; open calls fail.
func (r *RPC) Close() {
	for _, s := range r.stops {
		s()
	}
	r.mu.Lock()
	calls := r.calls
	r.calls = map[string]*call{}
	r.mu.Unlock()
	for _, c := range calls {
		c.cancel()
		c.done(Response{}, errors.New("bedrock: rpc closed"))
	}
}

// Handle serves method, answering on the bus's goroutine.
func (r *RPC) Handle(method string, m Method) {
	r.HandleAsync(method, func(params json.RawMessage, from *Envelope, reply func(any, error)) {
		reply(m(params, from))
	})
}

// HandleAsync serves method with an AsyncMethod.
func (r *RPC) HandleAsync(method string, m AsyncMethod) {
	r.mu.Lock()
	r.methods[method] = m
	r.mu.Unlock()
}

func (r *RPC) serve(e *Envelope) {
	respond := func(res Response) {
		res.RID = e.MID
		body, _ := json.Marshal(res)
		_, _ = r.bus.Reply(e, TypeResponse, body)
	}
	req, err := decodeRequest(e.Data)
	if err != nil {
		respond(Response{Err: "malformed request"})
		return
	}
	r.mu.Lock()
	m := r.methods[req.Method]
	r.mu.Unlock()
	if m == nil {
		respond(Response{Err: fmt.Sprintf("unknown method '%s'", req.Method)})
		return
	}
	var once sync.Once
	m(req.Params, e, func(v any, err error) {
		once.Do(func() {
			if err != nil {
				respond(Response{Err: err.Error()})
				return
			}
			data, err := marshalValue(v)
			if err != nil {
				respond(Response{Err: "unencodable result: " + err.Error()})
				return
			}
			respond(Response{OK: true, Data: data})
		})
	})
}

func (r *RPC) answer(e *Envelope) {
	res, err := decodeResponse(e.Data)
	if err != nil {
		return
	}
	r.mu.Lock()
	c := r.calls[res.RID]
	delete(r.calls, res.RID)
	r.mu.Unlock()
	if c != nil {
		c.cancel()
		c.done(res, nil)
	}
}

// Go calls method on dst and runs done with the response (or an error:
// ErrRPCTimeout after timeoutTicks, or the send's) on the bus's goroutine
// — the tick-driven form, for simulations. timeoutTicks ≤ 0 means
// DefaultRPCTimeoutTicks.
func (r *RPC) Go(dst, method string, params any, timeoutTicks int64, done func(Response, error)) {
	if timeoutTicks <= 0 {
		timeoutTicks = DefaultRPCTimeoutTicks
	}
	p, err := marshalValue(params)
	if err != nil {
		done(Response{}, err)
		return
	}
	body, _ := json.Marshal(Request{Method: method, Params: p})
	// The id is chosen before sending, so the call is registered before
	// any response (a loopback one included) can arrive.
	r.bus.mu.Lock()
	r.bus.counter++
	mid := r.bus.iid + "/" + fmt.Sprint(r.bus.counter)
	r.bus.mu.Unlock()
	c := &call{done: done}
	// Armed and registered under one lock, so Close or a (forged) early
	// response never finds the call without its timer.
	r.mu.Lock()
	c.cancel = r.bus.clock.After(timeoutTicks, func() {
		r.mu.Lock()
		_, open := r.calls[mid]
		delete(r.calls, mid)
		r.mu.Unlock()
		if open {
			done(Response{}, ErrRPCTimeout)
		}
	})
	r.calls[mid] = c
	r.mu.Unlock()
	if _, err := r.bus.Send(SendOptions{Dst: dst, Type: TypeRequest, MID: mid, Data: body}); err != nil {
		r.mu.Lock()
		_, open := r.calls[mid]
		delete(r.calls, mid)
		r.mu.Unlock()
		if open {
			c.cancel()
			done(Response{}, err)
		}
	}
}

// Call is Go for a caller that can wait (the clock runs elsewhere, as a
// RealClock does): it returns the result, a *RemoteError, ErrRPCTimeout or
// ctx's error.
func (r *RPC) Call(ctx context.Context, dst, method string, params any) (json.RawMessage, error) {
	type result struct {
		res Response
		err error
	}
	ch := make(chan result, 1)
	r.Go(dst, method, params, 0, func(res Response, err error) { ch <- result{res, err} })
	select {
	case out := <-ch:
		if out.err != nil {
			return nil, out.err
		}
		if !out.res.OK {
			return nil, &RemoteError{Text: out.res.Err}
		}
		return out.res.Data, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// marshalValue encodes v as JSON (nil stays absent; a json.RawMessage is
// taken as is).
func marshalValue(v any) (json.RawMessage, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if len(v) == 0 {
			return nil, nil
		}
		if !json.Valid(v) {
			return nil, errors.New("bedrock: not JSON")
		}
		return v, nil
	}
	return json.Marshal(v)
}
