package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"busbar/relay"
)

// A sender's push is acknowledged once it is on disk; the recipient's
// session delivers it, and its ack deletes it.
func Example() {
	dir, err := os.MkdirTemp("", "relay-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := relay.Open(dir, relay.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()

	seq, err := store.Push(ctx, "bob-phone", []byte("sealed bytes"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pushed", seq) // now the sender may delete its outbox entry

	session, err := store.Session("bob-phone")
	if err != nil {
		log.Fatal(err)
	}
	blob, err := session.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("delivered %d: %s\n", blob.Seq, blob.Data)
	if err := store.Ack("bob-phone", blob.Seq); err != nil {
		log.Fatal(err)
	}

	_, err = store.Push(ctx, "bob-phone", make([]byte, relay.MaxBlobBytes+1))
	code, _ := relay.RefusalCode(err)
	fmt.Println(err, "-", code, errors.Is(err, relay.ErrTooLarge))
	// Output:
	// pushed 1
	// delivered 1: sealed bytes
	// relay: push refused: too large (permanent) - too large true
}
