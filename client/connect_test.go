package client_test

// Connecting: what a client does when the broker it meets speaks another
// protocol.

import (
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"

	"busbar/auth"
	"busbar/client"
	"busbar/wire"
)

// TestClientRefusesIncompatibleBroker: a client that meets a broker
// announcing another protocol version fails with ErrIncompatible.
func TestClientRefusesIncompatibleBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		w := wire.NewWriter(nc)
		info, _ := json.Marshal(wire.Info{Broker: "future", Protocol: "2", Nonce: []byte("n")})
		_ = w.WriteMessage(wire.New(wire.TypeEvent, wire.CmdInfo).WithHeader(wire.HeaderBus, "2").WithBody(info))
		_ = w.Flush()
		r := wire.NewReader(nc)
		hello, err := r.ReadMessage()
		if err != nil {
			return
		}
		// A version-2 broker refuses a version-1 hello, saying why.
		_ = w.WriteMessage(wire.New(wire.TypeResponse, wire.CmdHello).WithHeader(wire.HeaderReplyTo, hello.Value(wire.HeaderID)).
			WithHeader(wire.HeaderRC, "20").WithHeader(wire.HeaderResult, string(wire.ResultVersion)).
			WithHeader(wire.HeaderError, `incompatible protocol version "1": this broker speaks "2"`))
		_ = w.Flush()
	}()
	_, err = client.Connect(ctxT(t, 5*time.Second), client.Options{Server: "tcp://" + ln.Addr().String(), Node: "old"})
	if !errors.Is(err, client.ErrIncompatible) {
		t.Fatalf("Connect = %v, want ErrIncompatible", err)
	}
	<-done
}

// TestNoSecretForIncompatibleBroker: a client never hands its secret to a
// broker that speaks another protocol.
// (The client used to send its secret in the hello whatever the broker's
// protocol.)
func TestNoSecretForIncompatibleBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hello := make(chan wire.Hello, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		w := wire.NewWriter(nc)
		info, _ := json.Marshal(wire.Info{Broker: "future", Protocol: "2", Nonce: []byte("n")})
		_ = w.WriteMessage(wire.New(wire.TypeEvent, wire.CmdInfo).WithBody(info))
		_ = w.Flush()
		m, err := wire.NewReader(nc).ReadMessage()
		var h wire.Hello
		if err == nil {
			_ = json.Unmarshal(m.Body(), &h)
		}
		hello <- h
	}()
	_, err = client.Connect(ctxT(t, 5*time.Second), client.Options{
		Server: "tcp://" + ln.Addr().String(), Node: "old", Credential: auth.Credential{Principal: "local", Secret: "s3cret"}})
	if !errors.Is(err, client.ErrIncompatible) {
		t.Fatalf("Connect = %v", err)
	}
	if h := <-hello; h.Secret != "" || h.Principal != "" || h.Node != "old" {
		t.Fatalf("hello to an incompatible broker: %+v", h)
	}
}
