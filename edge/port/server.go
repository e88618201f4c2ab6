package port

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"busbar/edge"
	"busbar/wire"
)

// Handler runs one command. args is the request's JSON body ("null" when
// it had none). The result is encoded as the reply's JSON body. An error
// is an rc 10 reply with its text, unless it is an *Error, which chooses
// the rc (below wire.RCError: a warning, with the result as the body). A
// handler must return once ctx ends.
type Handler func(ctx context.Context, args json.RawMessage) (any, error)

// Command is one entry of a port's table.
type Command struct {
	Description string
	Run         Handler
}

// Config describes a port. Zero limits take their Default values.
type Config struct {
	Name    string // the port's name, reported by info
	App     string // the program, reported by info
	Version string // the program's version, reported by info
	// Group is the service group ServeBus's announcement declares: ports
	// of one name on several nodes, announced with one group, share the
	// requests to the service (docs/discovery.md#service-groups).
	Group    string
	Commands map[string]Command // the program's own commands
	// Fallback, when set, runs every command that is neither in Commands
	// nor standard (a port that forwards to a script); command is the
	// requested name. Without it such a command is an rc 10 "Unknown
	// command" reply.
	Fallback func(ctx context.Context, command string, args json.RawMessage) (any, error)
	// Activate, when set, brings the program's window to the front and
	// makes the port answer the standard command activate.
	Activate func(ctx context.Context) error

	MaxRequestBytes int           // DefaultMaxRequestBytes
	ReadTimeout     time.Duration // DefaultReadTimeout
	HandlerTimeout  time.Duration // DefaultHandlerTimeout
	WriteTimeout    time.Duration // DefaultWriteTimeout
	MaxConns        int           // DefaultMaxConns: socket connections and bus calls together
	// MaxRequestMemory: DefaultMaxRequestMemory.
	MaxRequestMemory int64
	// Door is the shared door the port stands behind: Serve's accept loop
	// logs to Door.Log, and every refusal a caller can cause (the
	// Refused reasons) is written through Door.Refusals. Its zero value
	// is a door of the port's own that logs nowhere.
	Door edge.Door
}

func (c *Config) setDefaults() {
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.HandlerTimeout <= 0 {
		c.HandlerTimeout = DefaultHandlerTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxRequestMemory <= 0 {
		c.MaxRequestMemory = DefaultMaxRequestMemory
	}
	c.Door = c.Door.Ready()
}

// Server answers a port's commands on the listeners given to Serve.
type Server struct {
	cfg   Config
	cmds  map[string]Command // Config.Commands plus the standard ones
	slots chan struct{}      // one per connection being served or bus call running
	mem   byteBudget         // what the requests being read may still take

	ctx    context.Context // ends at Close: handlers' and reads' parent
	cancel context.CancelFunc

	lns    edge.Listeners // the listeners Serve runs
	mu     sync.Mutex     // guards closed; taken before wg.Add
	closed bool
	wg     sync.WaitGroup // Serve loops and connection goroutines
}

// New checks cfg and returns a Server. A command named like a standard
// one (help, info, activate) is refused: every port answers those the
// same way.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := ValidName(cfg.Name); err != nil {
		return nil, err
	}
	cmds := make(map[string]Command, len(cfg.Commands)+3)
	for name, c := range cfg.Commands {
		if isStandard(name) {
			return nil, fmt.Errorf("port: command %q is a standard command every port answers", name)
		}
		if name == "" || c.Run == nil {
			return nil, fmt.Errorf("port: command %q needs a name and a Run function", name)
		}
		if _, err := encodeRequest(name, nil); err != nil {
			return nil, err
		}
		cmds[name] = c
	}
	s := &Server{cfg: cfg, cmds: cmds, slots: make(chan struct{}, cfg.MaxConns)}
	s.mem.left.Store(cfg.MaxRequestMemory)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.addStandard()
	return s, nil
}

// Commands returns the names the port answers, sorted.
func (s *Server) Commands() []string {
	names := make([]string, 0, len(s.cmds))
	for n := range s.cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Serve accepts connections on l and answers each in a goroutine of its
// own until Close, then returns ErrServerClosed. It closes l when it
// returns. The accept loop is the edge's (edge.Accept, door DoorName): a
// temporary failure (out of descriptors) is retried after a pause that
// grows to edge.AcceptPauseMax; another failure of l ends Serve with it.
func (s *Server) Serve(l net.Listener) error {
	err := s.lns.Serve(l, DoorName, s.cfg.Door.Log, s.accept)
	if errors.Is(err, edge.ErrDoorClosed) || s.ctx.Err() != nil {
		return ErrServerClosed
	}
	return err
}

// accept hands conn to a goroutine of its own, or answers "busy" at once
// when MaxConns are being served.
func (s *Server) accept(conn net.Conn) {
	select {
	case s.slots <- struct{}{}:
	default:
		r := s.busy()
		s.refuse(RefusedBusy, "", r)
		// A short reply to a fresh socket fits its buffer: this write does
		// not wait for the peer, and the deadline makes sure.
		_ = conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = conn.Write(encodeReply(r))
		conn.Close()
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.slots
		conn.Close()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() { <-s.slots }()
		s.serveConn(conn)
	}()
}

// busy is the reply to a connection or bus call past MaxConns.
func (s *Server) busy() Reply {
	return failure("port %s is busy: %d connections already (MaxConns)", s.cfg.Name, s.cfg.MaxConns)
}

// serveConn reads one request, answers it and closes conn.
func (s *Server) serveConn(conn net.Conn) {
	defer conn.Close()
	stop := context.AfterFunc(s.ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	_ = conn.SetReadDeadline(time.Now().Add(s.cfg.ReadTimeout))
	data, held, err := readAll(conn, s.cfg.MaxRequestBytes, &s.mem)
	defer s.mem.give(held) // once the reply is written: the command's args alias data
	var r Reply
	switch {
	case errors.Is(err, errNoMemory):
		r = failure("port %s is busy: the requests being read hold %d bytes already (MaxRequestMemory)", s.cfg.Name, s.cfg.MaxRequestMemory)
		s.refuse(RefusedMemory, "", r)
	case errors.As(err, new(errTooLarge)):
		r = failure("request %v (MaxRequestBytes)", err)
		s.refuse(RefusedTooLarge, "", r)
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		if s.ctx.Err() != nil {
			r = failure("port %s is closing", s.cfg.Name)
		} else {
			r = failure("request not complete within %v (ReadTimeout): end it by shutting down the write side", s.cfg.ReadTimeout)
			s.refuse(RefusedTimeout, "", r)
		}
	case err != nil:
		return // the connection failed: nobody to answer
	default:
		r = s.handle(data)
	}
	_ = conn.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	_, _ = conn.Write(encodeReply(r))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// failure is an rc 20 reply: the request could not be run at all.
func failure(format string, a ...any) Reply {
	return Reply{RC: wire.RCFailure, Error: fmt.Sprintf(format, a...)}
}

// handle parses a request and runs its command; a request that cannot
// be run is refused (RefusedMalformed).
func (s *Server) handle(data []byte) Reply {
	r, cmd, args := parseRequest(data)
	if r != nil {
		s.refuse(RefusedMalformed, "", *r)
		return *r
	}
	return s.Dispatch(s.ctx, cmd, args)
}

// parseRequest is a request's command and arguments, or the reply to a
// request that has none.
func parseRequest(data []byte) (*Reply, string, json.RawMessage) {
	refuse := func(format string, a ...any) (*Reply, string, json.RawMessage) {
		r := failure(format, a...)
		return &r, "", nil
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return refuse("empty request: want a frame with a command header")
	}
	// Plain parse, as forgiving as cosmix's: defective lines are skipped.
	m, err := wire.Parse(data)
	if err != nil {
		return refuse("malformed request: %v", err)
	}
	cmd, ok := m.Get(wire.HeaderCommand)
	if cmd = strings.TrimSpace(cmd); !ok || cmd == "" {
		return refuse("missing 'command' header")
	}
	args := json.RawMessage(bytes.TrimSpace(m.Body()))
	if len(args) == 0 {
		args = json.RawMessage("null")
	} else if !json.Valid(args) {
		return refuse("arguments of %q are not JSON", cmd)
	}
	return nil, cmd, args
}

// Dispatch runs command with args as a request would, bounded by
// HandlerTimeout and Close, and returns the reply it would send. ServeBus
// uses it.
func (s *Server) Dispatch(ctx context.Context, command string, args json.RawMessage) Reply {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.HandlerTimeout)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)() // Close ends a bus request's command too
	var run Handler
	if c, ok := s.cmds[command]; ok {
		run = c.Run
	} else if s.cfg.Fallback != nil {
		run = func(ctx context.Context, args json.RawMessage) (any, error) {
			return s.cfg.Fallback(ctx, command, args)
		}
	} else {
		return Reply{RC: wire.RCError, Error: fmt.Sprintf("Unknown command '%s'. Available: %s", command, strings.Join(s.Commands(), ", "))}
	}
	v, err := run(ctx, args)
	return s.replyOf(ctx, v, err)
}

// replyOf turns a handler's result into a reply.
func (s *Server) replyOf(ctx context.Context, v any, err error) Reply {
	var pe *Error
	switch {
	case errors.As(err, &pe) && pe.RC >= wire.RCError:
		return Reply{RC: pe.RC, Error: pe.Text}
	case err != nil && pe == nil:
		if s.ctx.Err() != nil {
			return failure("port %s is closing", s.cfg.Name)
		}
		if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			return failure("command did not finish within %v (HandlerTimeout)", s.cfg.HandlerTimeout)
		}
		return Reply{RC: wire.RCError, Error: err.Error()}
	}
	r := Reply{}
	if pe != nil { // a warning: the result, if any, travels with it
		r.RC, r.Error = pe.RC, pe.Text
		if v == nil {
			return r
		}
	}
	body, merr := marshal(v)
	if merr != nil {
		return failure("reply is not JSON: %v", merr)
	}
	r.Body = body
	return r
}

// Close stops every Serve loop, ends the handlers' context, and waits for
// the connections being served to finish (each is bounded by its
// deadlines). It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.lns.Wait()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	s.cancel()
	s.lns.Close()
	s.mu.Unlock()
	s.lns.Wait() // no accept adds to wg after this
	s.wg.Wait()
	return nil
}
