package trueseal

import (
	"io"
	"net"
	"testing"
	"time"

	"busbar/relay"
)

// FuzzHandshake feeds the relay what a peer could send before any
// handshake is done: the bytes of the stream, length prefixes and all,
// then the end of the stream. Nothing may panic, and the session must
// end when the stream does.
func FuzzHandshake(f *testing.F) {
	dir := f.TempDir()
	st, err := relay.Open(dir, relay.Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	k, _, err := LoadOrCreateKey(dir)
	if err != nil {
		f.Fatal(err)
	}
	srv, err := NewServer(Options{Key: k, Store: st, HandshakeTimeout: time.Second, IdleTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()
	f.Add([]byte{0, 32, 1, 2, 3})
	f.Add(append([]byte{0, 32}, make([]byte, 32)...))
	f.Add(append([]byte{0, 48}, make([]byte, 48)...))
	f.Add([]byte{0xff, 0xff, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		peer, relaySide := net.Pipe()
		drained := make(chan struct{})
		go func() { // what the relay answers is read, so it never waits on the pipe
			defer close(drained)
			_, _ = io.Copy(io.Discard, peer)
		}()
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			_, _ = peer.Write(in)
			peer.Close()
		}()
		srv.serveConn(relaySide)
		relaySide.Close()
		<-wrote
		<-drained
	})
}
