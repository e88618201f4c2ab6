package port

import (
	"context"
	"encoding/json"
	"fmt"

	"busbar/client"
	"busbar/wire"
)

// busNamespace is the namespace of the channels ports answer on the bus.
const busNamespace = "port"

// BusChannel is the channel on which a port named name answers bus
// requests: "port:NAME", a namespaced channel.
func BusChannel(name string) string { return busNamespace + ":" + name }

// BusRequest is the payload of a bus request to a port: the command and
// its JSON arguments (absent: null).
type BusRequest struct {
	Command string          `json:"command"`
	Args    json.RawMessage `json:"args,omitempty"`
}

// ServeBus makes the port answer requests on BusChannel over c, and, when
// service is not empty, announces a service of that name (version
// Config.Version, group Config.Group) handling that channel, so a request can name the service
// as its target. A reply's body is the port's JSON body; an rc of
// wire.RCError or more is a handler error with that rc and text
// (HANDLER_FAILED); a warning's text does not travel. The registration
// lasts as long as c (restored by its reconnects).
func (s *Server) ServeBus(ctx context.Context, c *client.Client, service string) error {
	ch := BusChannel(s.cfg.Name)
	_, err := c.Scope("port").Channel(ch).Handle(ctx, func(hctx context.Context, m *client.Message) ([]byte, error) {
		var req BusRequest
		if err := json.Unmarshal(m.Payload(), &req); err != nil || req.Command == "" {
			text := `want a JSON payload {"command": NAME, "args": ARGS}`
			s.refuse(RefusedMalformed, m.From(), failure("%s", text))
			return nil, &client.HandlerError{RC: wire.RCFailure, Text: text}
		}
		if len(req.Args) == 0 {
			req.Args = json.RawMessage("null")
		}
		select { // a bus call takes a place of MaxConns, as a connection does
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		default:
			r := s.busy()
			s.refuse(RefusedBusy, m.From(), r)
			return nil, &client.HandlerError{RC: wire.RCFailure, Text: r.Error}
		}
		r := s.Dispatch(hctx, req.Command, req.Args)
		if r.RC.IsError() {
			return nil, &client.HandlerError{RC: r.RC, Text: r.Error}
		}
		return r.Body, nil
	})
	if err != nil {
		return fmt.Errorf("port %s: handle %s: %w", s.cfg.Name, ch, err)
	}
	if service == "" {
		return nil
	}
	if _, err := c.Announce(ctx, wire.Announcement{Service: service, Version: s.cfg.Version, Group: s.cfg.Group, Channels: []string{ch}}); err != nil {
		return fmt.Errorf("port %s: announce %s: %w", s.cfg.Name, service, err)
	}
	return nil
}
