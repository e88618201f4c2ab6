package client_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/transport"
)

// ExampleOptions_reconnecting keeps a subscriber across a broker restart:
// the broker stops, starts again on the same socket, and the client
// reconnects and restores its subscription (by default within 60
// attempts; this one never gives up).
func ExampleOptions_reconnecting() {
	dir, _ := os.MkdirTemp("", "busbar-example")
	defer os.RemoveAll(dir)
	secret, hash, _ := auth.NewSecret()
	store, _ := auth.NewStore([]auth.Principal{{Name: "app", SecretHash: hash, Nodes: []auth.Pattern{"*"}, Permissions: auth.AllPermissions()}})
	ep := transport.Endpoint{Scheme: transport.SchemeUnix, Address: filepath.Join(dir, "busbar.sock")}
	serve := func() *broker.Broker {
		b, _ := broker.New(broker.Options{Name: "hub", Auth: store})
		ln, _ := transport.Listen(ep, nil)
		go b.Serve(ln)
		return b
	}
	b := serve()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	events := make(chan client.ConnEvent, 8)
	opts := client.Options{
		Server: ep.String(), // or several: "unix:///a.sock,tcp://10.0.0.2:7474"
		Node:   "listener", Credential: auth.Credential{Principal: "app", Secret: secret},
		MaxReconnects: client.ReconnectForever, // 0, the default, gives up after 60 attempts; client.NoReconnect, at once
		OnConnEvent:   func(ev client.ConnEvent) { events <- ev },
	}
	c, err := client.Connect(ctx, opts)
	if err != nil {
		panic(err)
	}
	got := make(chan string, 1)
	c.Scope("app").Channel("news").Subscribe(ctx, func(_ context.Context, m *client.Message) { got <- string(m.Payload()) })

	_ = b.Shutdown(ctx) // the broker goes away…
	fmt.Println((<-events).Kind)
	b = serve() // …and comes back on the same socket
	fmt.Println((<-events).Kind)

	opts.Node, opts.MaxReconnects, opts.OnConnEvent = "publisher", client.NoReconnect, nil
	pub, _ := client.Connect(ctx, opts)
	pub.Scope("app").Channel("news").Send(ctx, "listener", []byte("still here"))
	fmt.Println(<-got)
	pub.Close()
	c.Close()
	fmt.Println((<-events).Kind)
	_ = b.Shutdown(ctx)
	// Output:
	// disconnected
	// reconnected
	// still here
	// closed
}
