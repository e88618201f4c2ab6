package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"busbar/broker"
	"busbar/client"
)

// Example_state writes a namespace from its owner, watches it from another
// node, and shows the ownership rule: a key is the owner's until opened.
func Example_state() {
	b, _ := broker.New(broker.Options{}) // StatePath: a file, to keep state across restarts
	defer b.Shutdown(context.Background())
	inproc := client.Options{Dial: func(context.Context) (net.Conn, error) { return b.DialInProcess() }}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	opts := inproc
	opts.Node = "thermostat"
	owner, _ := client.Connect(ctx, opts)
	defer owner.Close()
	opts.Node = "phone"
	phone, _ := client.Connect(ctx, opts)
	defer phone.Close()

	home := owner.State("home") // the first write makes thermostat the owner
	home.Set(ctx, "target", 20.5)
	home.Set(ctx, "mode", "eco")

	w, _ := phone.State("home").Watch(ctx)
	defer w.Close()
	for _, e := range w.Initial().Entries {
		fmt.Printf("initial %s=%s (v%d from %s)\n", e.Key, e.Value, e.Version, e.Source)
	}

	// The phone may not write the owner's keys...
	_, err := phone.State("home").Set(ctx, "target", 23)
	fmt.Println("phone writes target:", errors.Is(err, client.ErrRejected))
	// ...until the owner opens one.
	home.Open(ctx, "target")
	if _, err := phone.State("home").Set(ctx, "target", 22); err != nil {
		panic(err)
	}
	for range 2 {
		e := <-w.Changes()
		fmt.Printf("change %s=%s from %s, open=%v\n", e.Key, e.Value, e.Source, e.Open)
	}
	// Output:
	// initial mode="eco" (v2 from thermostat)
	// initial target=20.5 (v1 from thermostat)
	// phone writes target: true
	// change target=20.5 from thermostat, open=true
	// change target=22 from phone, open=true
}
