package client_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"busbar/broker"
	"busbar/client"
)

// Example embeds a broker, connects two nodes in-process, and has one
// answer the other's request and receive its event. Over a socket only
// Options changes: Server and Credential instead of Dial.
func Example() {
	b, _ := broker.New(broker.Options{})
	defer b.Shutdown(context.Background())
	inproc := client.Options{Dial: func(context.Context) (net.Conn, error) { return b.DialInProcess() }}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	opts := inproc
	opts.Node = "billing"
	billing, _ := client.Connect(ctx, opts)
	defer billing.Close()
	opts.Node = "shop"
	shop, _ := client.Connect(ctx, opts)
	defer shop.Close()

	// billing: one handler for invoice.total, one subscriber for orders.created.
	plugin := billing.Scope("invoices")
	plugin.Channel("invoice.total").Handle(ctx, func(_ context.Context, m *client.Message) ([]byte, error) {
		return fmt.Appendf(nil, "total for %s: 42", m.Payload()), nil
	})
	got := make(chan string, 1)
	plugin.Channel("orders.created").Subscribe(ctx, func(_ context.Context, m *client.Message) {
		got <- fmt.Sprintf("event %q from %s", m.Payload(), m.From())
	})

	// shop: a request, then an event.
	orders := shop.Scope("orders")
	reply, err := orders.Channel("invoice.total").Request(ctx, "billing", []byte("order-7"))
	if err != nil {
		panic(err)
	}
	fmt.Printf("reply %q from %s\n", reply.Payload(), reply.From())
	receipt, err := orders.Channel("orders.created").Send(ctx, "billing", []byte("order-8"))
	if err != nil {
		panic(err)
	}
	fmt.Println("receipt", receipt.Result)
	fmt.Println(<-got)
	// Output:
	// reply "total for order-7: 42" from billing.bus
	// receipt ACCEPTED
	// event "order-8" from shop.bus
}
