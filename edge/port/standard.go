package port

import (
	"context"
	"encoding/json"

	"busbar/wire"
)

// The standard commands every port answers, as cosmix's standard_help,
// standard_info and standard_activate define them.
const (
	CmdHelp     = "help"
	CmdInfo     = "info"
	CmdActivate = "activate" // only where Config.Activate is set
)

func isStandard(name string) bool { return name == CmdHelp || name == CmdInfo || name == CmdActivate }

// Info is the body of the standard info reply: cosmix's fields, in the
// order serde_json writes them (by key).
type Info struct {
	App         string   `json:"app"`
	CommandList []string `json:"command_list"`
	Commands    int      `json:"commands"`
	Port        string   `json:"port"`
	Version     string   `json:"version"`
}

// Help is the body of the standard help reply with no argument: the
// command names (cosmix's one field) and each one's description.
type Help struct {
	Commands     []string          `json:"commands"`
	Descriptions map[string]string `json:"descriptions"`
}

// CommandHelp is the body of help for one command ({"command": NAME} or
// the bare string NAME as the argument).
type CommandHelp struct {
	Command     string `json:"command"`
	Description string `json:"description"`
}

// addStandard puts help, info and (with Activate) activate in the table.
func (s *Server) addStandard() {
	if s.cfg.Activate != nil {
		s.cmds[CmdActivate] = Command{Description: "Bring application window to front", Run: func(ctx context.Context, _ json.RawMessage) (any, error) {
			if err := s.cfg.Activate(ctx); err != nil {
				return nil, err
			}
			return "activated", nil
		}}
	}
	s.cmds[CmdInfo] = Command{Description: "Return port and application metadata", Run: func(context.Context, json.RawMessage) (any, error) {
		names := s.Commands()
		return Info{Port: s.cfg.Name, App: s.cfg.App, Version: s.cfg.Version, Commands: len(names), CommandList: names}, nil
	}}
	s.cmds[CmdHelp] = Command{Description: "List commands or describe a specific command", Run: s.help}
}

func (s *Server) help(_ context.Context, args json.RawMessage) (any, error) {
	var name string
	var obj struct {
		Command string `json:"command"`
	}
	if json.Unmarshal(args, &name) != nil && json.Unmarshal(args, &obj) == nil {
		name = obj.Command
	}
	if name != "" {
		c, ok := s.cmds[name]
		if !ok {
			return nil, &Error{RC: wire.RCError, Text: "Unknown command: " + name}
		}
		return CommandHelp{Command: name, Description: c.Description}, nil
	}
	h := Help{Commands: s.Commands(), Descriptions: map[string]string{}}
	for n, c := range s.cmds {
		h.Descriptions[n] = c.Description
	}
	return h, nil
}
