package seal

import (
	"bytes"
	"testing"
)

// A receive proof is good for its device and its connection's nonce only.
func TestReceiveProofIsBoundToDeviceAndNonce(t *testing.T) {
	a, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	nonce := bytes.Repeat([]byte{7}, 32)
	sig := a.ProveReceive(nonce)
	if !VerifyReceive(a.Public(), nonce, sig) {
		t.Fatal("a device's own proof was refused")
	}
	other := bytes.Repeat([]byte{8}, 32)
	if VerifyReceive(a.Public(), other, sig) {
		t.Fatal("a proof passed for another connection's nonce")
	}
	if VerifyReceive(b.Public(), nonce, sig) {
		t.Fatal("a proof passed for another device")
	}
	if VerifyReceive(a.Public(), nonce, sig[:len(sig)-1]) {
		t.Fatal("a short signature passed")
	}
}
