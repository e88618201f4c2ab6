package web_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"busbar/auth"
	"busbar/broker"
	"busbar/client"
	"busbar/transport"
	"busbar/web"
)

// ExampleHandler gives a broker the HTTP listener busbar serve has: the
// bus over WebSocket at /bus and busbar.js at /busbar.js. A Go client
// reaches it with a ws:// endpoint; a page with busbar.js (docs/browser.md).
func ExampleHandler() {
	secret, hash, _ := auth.NewSecret()
	store, _ := auth.NewStore([]auth.Principal{{Name: "web", SecretHash: hash, Nodes: []auth.Pattern{"*"}, Permissions: auth.AllPermissions()}})
	b, _ := broker.New(broker.Options{Auth: store})

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	bus := transport.NewWebSocketListener(ln.Addr(), transport.WebSocketOptions{})
	srv := &http.Server{Handler: web.Handler(bus), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{}, 2)
	go func() { _ = srv.Serve(ln); served <- struct{}{} }()
	go func() { _ = b.Serve(bus); served <- struct{}{} }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "ws://" + ln.Addr().String() + transport.WebSocketPath
	opts := client.Options{Server: url, Credential: auth.Credential{Principal: "web", Secret: secret}}
	opts.Node = "billing"
	billing, _ := client.Connect(ctx, opts)
	billing.Scope("invoices").Channel("invoice.total").Handle(ctx, func(_ context.Context, m *client.Message) ([]byte, error) {
		return fmt.Appendf(nil, "total for %s: 42", m.Payload()), nil
	})
	opts.Node = "shop"
	shop, _ := client.Connect(ctx, opts)
	reply, err := shop.Scope("orders").Channel("invoice.total").Request(ctx, "billing", []byte("order-7"))
	fmt.Println(string(reply.Payload()), err)

	resp, _ := http.Get("http://" + ln.Addr().String() + web.ClientPath)
	resp.Body.Close()
	fmt.Println(resp.Status, resp.Header.Get("Content-Type"))

	shop.Close()
	billing.Close()
	_ = b.Shutdown(ctx) // closes bus
	_ = srv.Shutdown(ctx)
	<-served
	<-served
	// Output:
	// total for order-7: 42 <nil>
	// 200 OK text/javascript; charset=utf-8
}
