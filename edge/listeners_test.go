package edge

import (
	"errors"
	"net"
	"testing"
)

// Serve serves until Close, which ends it with ErrDoorClosed; a Serve
// after Close is refused at once and closes its listener.
func TestListenersCloseEndsEveryServeAndRefusesLaterOnes(t *testing.T) {
	var ls Listeners
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan net.Conn, 1)
	done := make(chan error, 1)
	go func() { done <- ls.Serve(ln, "test-listeners", nil, func(c net.Conn) { served <- c }) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	(<-served).Close() // the loop is running, its listener registered
	ls.Close()
	if err := <-done; !errors.Is(err, ErrDoorClosed) {
		t.Fatalf("Serve after Close returned %v, want ErrDoorClosed", err)
	}
	ls.Wait()
	late, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Serve(late, "test-listeners", nil, func(net.Conn) { t.Error("served after Close") }); !errors.Is(err, ErrDoorClosed) {
		t.Fatalf("a Serve after Close returned %v, want ErrDoorClosed", err)
	}
	if _, err := late.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the refused listener was not closed: %v", err)
	}
}
