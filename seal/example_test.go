package seal_test

// Runnable documentation: sealing a message to one device, and a new
// device joining a group with an invitation token.

import (
	"fmt"
	"time"

	"busbar/seal"
)

func ExampleSeal() {
	alice, _ := seal.Generate()
	bob, _ := seal.Generate()
	home, _ := seal.NewGroup(alice, "home", "laptop")
	home, _ = home.Add(alice, bob.Public(), "phone")

	// The message is made once; its id and timestamp survive re-seals.
	msg, _ := seal.NewMessage(seal.KindSync, "home", []byte("hello, bob"), time.Now())
	blob, _ := seal.Seal(alice, bob.Public(), msg)

	// What a relay can read without keys.
	v, _ := seal.PeekVersion(blob)
	to, _ := seal.PeekRecipient(blob)
	fmt.Println("version", v, "to bob:", to == bob.ID(), "size", len(blob))

	// Bob opens it and checks alice against the manifest he holds.
	in, err := seal.Open(bob, blob, home)
	fmt.Println(string(in.Body), in.Sender == alice.ID(), in.ID == msg.ID, err)

	// Alice cannot open what she sealed to bob.
	_, err = seal.Open(alice, blob, home)
	fmt.Println(err != nil)
	// Output:
	// version 1 to bob: true size 1290
	// hello, bob true true <nil>
	// true
}

func ExampleManifest_Invite() {
	now := time.Now()
	alice, _ := seal.Generate()
	home, _ := seal.NewGroup(alice, "home", "laptop")

	// Alice invites; the token's text is shown to the user, who pastes
	// it on the new device.
	tok, _ := home.Invite(alice, time.Hour, now)
	text := tok.Text()

	// The new device answers with a Pair sealed to the inviter.
	bob, _ := seal.Generate()
	bobTok, _ := seal.ParseToken(text)
	pair, _ := bobTok.PairMessage(bob, "phone", now)
	blob, _ := seal.Seal(bob, bobTok.Inviter(), pair)

	// Alice checks it against the token she kept, and answers every
	// member with the next manifest.
	in, _ := seal.Open(alice, blob, home)
	p, err := tok.VerifyPair(in, now)
	fmt.Println("pair:", err)
	home, _ = home.Add(alice, p.Joiner, p.Label)
	msg, _ := seal.NewMessage(seal.KindGroupManifest, "home", home.Bytes(), now)
	blob, _ = seal.Seal(alice, bob.Public(), msg)

	// Bob, holding no manifest yet, trusts the inviter the token names.
	in, _ = seal.Open(bob, blob, bobTok)
	joined, err := seal.ApplyInvited(bobTok, bob.ID(), in)
	fmt.Println("joined:", err, "epoch", joined.Epoch(), "members", joined.Len())
	// Output:
	// pair: <nil>
	// joined: <nil> epoch 2 members 2
}
