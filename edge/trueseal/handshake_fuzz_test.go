package trueseal

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/flynn/noise"

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
		srv.serveConn(relaySide, func() {})
		relaySide.Close()
		<-wrote
		<-drained
	})
}

// FuzzSession feeds the relay arbitrary frames after a real handshake:
// the first input byte picks a push (even) or a receive (odd) session,
// the rest is the plaintext of one transport message, sent encrypted as
// a client would, followed by a DeliverAck and the end of the stream.
// Nothing may panic, and the session must end when the stream does.
func FuzzSession(f *testing.F) {
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
	dev, err := noise.DH25519.GenerateKeypair(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{0, 1, 0, 0, 0, 33, 0})
	f.Add(append([]byte{0}, AppendFrame(nil, Push, make([]byte, 40))...))
	f.Add(append([]byte{1}, AppendFrame(nil, DeliverAck, make([]byte, 8))...))
	f.Add(append([]byte{1}, AppendFrame(nil, Heartbeat, nil)...))
	f.Add([]byte{1, 6, 0, 0, 0, 8, 1, 2})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 || len(in) > MaxFrameBytes+1 {
			return
		}
		peer, relaySide := net.Pipe()
		served := make(chan struct{})
		go func() { defer close(served); srv.ServeConn(relaySide) }()
		defer func() { peer.Close(); <-served }()
		cfg := noise.Config{CipherSuite: suite, Pattern: noise.HandshakeNK, Initiator: true, PeerStatic: k.Public}
		if in[0]&1 == 1 {
			cfg = noise.Config{CipherSuite: suite, Pattern: noise.HandshakeXX, Initiator: true, StaticKeypair: dev}
		}
		hs, err := noise.NewHandshakeState(cfg)
		if err != nil {
			t.Fatal(err)
		}
		msg, _, _, _ := hs.WriteMessage(nil, nil)
		if _, err := peer.Write(appendMessage(nil, msg)); err != nil {
			t.Fatal(err)
		}
		resp, err := readMessage(peer, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, send, _, err := hs.ReadMessage(nil, resp)
		if err != nil {
			t.Fatal(err)
		}
		if in[0]&1 == 1 {
			msg, send, _, _ = hs.WriteMessage(nil, nil)
			if _, err := peer.Write(appendMessage(nil, msg)); err != nil {
				t.Fatal(err)
			}
		}
		drained := make(chan struct{})
		go func() { defer close(drained); _, _ = io.Copy(io.Discard, peer) }()
		for _, plain := range [][]byte{in[1:], AppendFrame(nil, DeliverAck, make([]byte, 8))} {
			ct, err := send.Encrypt(nil, nil, plain)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := peer.Write(appendMessage(nil, ct)); err != nil {
				break // the relay closed the session (a temporary refusal)
			}
		}
		peer.Close()
		<-drained
	})
}
