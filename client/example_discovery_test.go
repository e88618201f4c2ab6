package client_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"busbar/broker"
	"busbar/client"
	"busbar/wire"
)

// Example_discovery announces a service, finds it with one Whois, calls it
// by its bare name, and follows the registry as the service leaves.
func Example_discovery() {
	b, _ := broker.New(broker.Options{})
	defer b.Shutdown(context.Background())
	inproc := client.Options{Dial: func(context.Context) (net.Conn, error) { return b.DialInProcess() }}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	opts := inproc
	opts.Node = "node-7"
	host, _ := client.Connect(ctx, opts)
	opts.Node = "shop"
	shop, _ := client.Connect(ctx, opts)
	defer shop.Close()

	// The host handles a channel and announces the service behind it.
	host.Scope("geo").Channel("geo.lookup").Handle(ctx, func(_ context.Context, m *client.Message) ([]byte, error) {
		return fmt.Appendf(nil, "%s is in Lisbon", m.Payload()), nil
	})
	host.Announce(ctx, wire.Announcement{Service: "geo", Version: "2.1.0", SchemaVersion: 3, Channels: []string{"geo.lookup"}})

	// Anyone learns the registry in one round trip...
	services, _ := shop.Whois(ctx, "")
	for _, s := range services {
		fmt.Println(s.Service, s.Version, s.Address, s.Channels)
	}
	// ...and calls the service by its bare name.
	reply, _ := shop.Scope("orders").Channel("geo.lookup").Request(ctx, "geo", []byte("order-9"))
	fmt.Printf("%s (from %s)\n", reply.Payload(), reply.From())

	// A watch sees the service go when its node leaves.
	w, _ := shop.WatchServices(ctx)
	defer w.Close()
	host.Close()
	ev := <-w.Events()
	fmt.Println(ev.Op, ev.Service.Address)
	// Output:
	// geo 2.1.0 geo.node-7.bus [geo.lookup]
	// order-9 is in Lisbon (from node-7.bus)
	// down geo.node-7.bus
}
