package port_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"busbar/edge/port"
)

// A program serves a port with one command of its own; a script calls it,
// and the standard info command, and a command that fails.
func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	srv, err := port.New(port.Config{
		Name: "notes", App: "notes", Version: "1.0",
		Commands: map[string]port.Command{
			"count": {Description: "Count the notes", Run: func(ctx context.Context, args json.RawMessage) (any, error) {
				return map[string]int{"notes": 3}, nil
			}},
		},
	})
	if err != nil {
		panic(err)
	}
	l, err := port.Listen(filepath.Join(dir, "notes.sock")) // a named port: port.Path("notes")
	if err != nil {
		panic(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() { srv.Close(); <-served }()

	ctx := context.Background()
	path := filepath.Join(dir, "notes.sock")
	r, err := port.CallPort(ctx, path, "count", nil)
	fmt.Println(r.RC, string(r.Body), err)

	info, _, err := port.CallPortTyped[port.Info](ctx, path, "info", nil)
	fmt.Println(info.App, info.Version, info.CommandList, err)

	_, err = port.CallPort(ctx, path, "delete", map[string]int{"id": 1})
	var appErr *port.Error
	fmt.Println(errors.As(err, &appErr), appErr.RC, appErr.Text)
	// Output:
	// 0 {"notes":3} <nil>
	// notes 1.0 [count help info] <nil>
	// true 10 Unknown command 'delete'. Available: count, help, info
}
