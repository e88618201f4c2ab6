package wire_test

// Runnable documentation of the wire package.

import (
	"bytes"
	"errors"
	"fmt"

	"busbar/wire"
)

func ExampleMessage_ToWire() {
	m := wire.Command("noded.ping").
		WithHeader(wire.HeaderFrom, "probe").
		WithHeader(wire.HeaderID, "1").
		WithHeader(wire.HeaderTo, "noded").
		WithBody([]byte(`{"detail":true}`))
	fmt.Println(m.ToWire())
	// Output:
	// ---
	// command: noded.ping
	// from: probe
	// id: 1
	// to: noded
	// type: request
	// ---
	// {"detail":true}
}

func ExampleParseLenient() {
	m, report, err := wire.ParseLenient([]byte("---\ntype: event\n bad: indent\nno separator\n---\nhello\n"))
	if err != nil {
		panic(err)
	}
	fmt.Println(m.HeaderMap(), string(m.Body()))
	for _, d := range report.Defects {
		fmt.Println(d)
	}
	// Output:
	// map[type:event] hello
	// line 3: header line starts with whitespace: " bad: indent"
	// line 4: header line has no ": " separator: "no separator"
}

func ExampleParseStrict() {
	_, err := wire.ParseStrict([]byte("---\nargs: {oops\n---\n"))
	fmt.Println(err)
	fmt.Println(errors.Is(err, wire.ErrMalformed))
	// Output:
	// wire: malformed frame: line 2: header value looks like JSON but is not valid JSON: "args: {oops"
	// true
}

func ExampleWriter() {
	var conn bytes.Buffer // stands in for a net.Conn
	w := wire.NewWriter(&conn)
	_ = w.WriteMessage(wire.Empty()) // heartbeat
	_ = w.WriteMessage(wire.New(wire.TypeEvent, "chat").WithBody([]byte{0, 1, 2}))
	_ = w.Flush()

	r := wire.NewReader(&conn)
	for {
		m, err := r.ReadMessage()
		if err != nil {
			break // io.EOF here
		}
		fmt.Printf("heartbeat=%v command=%q body=% x\n", m.IsHeartbeat(), m.Value(wire.HeaderCommand), m.Body())
	}
	// Output:
	// heartbeat=true command="" body=
	// heartbeat=false command="chat" body=00 01 02
}

func ExampleParseTarget() {
	for _, s := range []string{"noded", "noded.alpha", "x.noded.alpha.bus", "noded.alpha.bus@mesh.example.com"} {
		t, err := wire.ParseTarget(s)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-34s kind=%-10s display=%s\n", s, t.Kind, t)
	}
	// Output:
	// noded                              kind=service    display=noded
	// noded.alpha                        kind=address    display=noded.alpha.bus
	// x.noded.alpha.bus                  kind=address    display=x.noded.alpha.bus
	// noded.alpha.bus@mesh.example.com   kind=cross-mesh display=noded.alpha.bus@mesh.example.com
}

// A response's rc says whether the call failed. A call that got no
// response has no return code: its failure is the caller's error value
// (docs/protocol.md#return-codes).
func ExampleResponseRC() {
	for _, resp := range []*wire.Message{
		wire.New(wire.TypeResponse, "kv.get").WithBody([]byte("42")),
		wire.New(wire.TypeResponse, "kv.get").WithHeader(wire.HeaderRC, "5"),
		wire.New(wire.TypeResponse, "kv.get").WithHeader(wire.HeaderRC, "10").WithHeader(wire.HeaderError, "no such key"),
		wire.New(wire.TypeResponse, "kv.get").WithHeader(wire.HeaderRC, "ten"),
	} {
		rc := wire.ResponseRC(resp)
		fmt.Printf("rc=%-2d error=%-5v text=%q\n", rc, rc.IsError(), resp.Value(wire.HeaderError))
	}
	// Output:
	// rc=0  error=false text=""
	// rc=5  error=false text=""
	// rc=10 error=true  text="no such key"
	// rc=20 error=true  text=""
}
