package durable_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"busbar/durable"
	"busbar/relay"
	"busbar/seal"
)

// storeRelay is the smallest Relay over a relay.Store (no refusal
// mapping; see the package's tests for the full one).
type storeRelay struct{ st *relay.Store }

func (r storeRelay) Push(ctx context.Context, blob []byte) (uint64, error) {
	to, err := seal.PeekRecipient(blob)
	if err != nil {
		return 0, &durable.RefusedError{Code: durable.CodeMalformed}
	}
	seq, err := r.st.Push(ctx, to.String(), blob)
	return uint64(seq), err
}

func (r storeRelay) Receive(ctx context.Context, me *seal.Identity) (durable.Session, error) {
	ss, err := r.st.Session(me.ID().String())
	return session{r.st, ss, me.ID().String()}, err
}

type session struct {
	st  *relay.Store
	ss  *relay.Session
	dev string
}

func (s session) Next(ctx context.Context) (uint64, []byte, error) {
	b, err := s.ss.Next(ctx)
	return uint64(b.Seq), b.Data, err
}

func (s session) Ack(ctx context.Context, seq uint64) error { return s.st.Ack(s.dev, relay.Seq(seq)) }

func Example() {
	tmp, _ := os.MkdirTemp("", "durable-example")
	defer os.RemoveAll(tmp)
	st, _ := relay.Open(filepath.Join(tmp, "relay"), relay.Options{})
	defer st.Close()
	r := storeRelay{st}

	alice, _ := durable.Init(filepath.Join(tmp, "alice"), durable.Options{})
	bob, _ := durable.Init(filepath.Join(tmp, "bob"), durable.Options{})
	m, _ := alice.CreateGroup("home", "alice's laptop")
	m, _ = m.Add(alice.Identity(), bob.Identity().Public(), "bob's phone")
	alice.InstallGroup(m) // pairing over the durable path is to come
	bob.InstallGroup(m)

	alice.Send(context.Background(), "home", []byte("hello, bob")) // queued, on disk
	alice.Flush(context.Background(), r)                           // pushed

	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	bob.OnMessage(func(_ context.Context, msg durable.Message) error {
		fmt.Printf("%s from %s\n", msg.Body, msg.From.Label)
		stop()
		return nil
	})
	if err := bob.Run(ctx, r); !errors.Is(err, context.Canceled) {
		fmt.Println(err)
	}
	// Output: hello, bob from alice's laptop
}
