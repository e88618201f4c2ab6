package seal

import (
	"crypto/ed25519"
	"crypto/hpke"
	"crypto/rand"
	"fmt"
)

// An Identity is a device's key pairs: an Ed25519 key that signs what the
// device writes and an HPKE MLKEM768-X25519 key that opens what is sealed
// to it. It is immutable and safe for concurrent use. Keep it in the
// device's directory with Save and Load; printing it shows only its id.
type Identity struct {
	sign    ed25519.PrivateKey
	kemSeed []byte
	kem     hpke.PrivateKey
	pub     Public
}

// Generate creates a new identity from the system's secure random source.
func Generate() (*Identity, error) {
	signSeed := make([]byte, ed25519.SeedSize)
	kemSeed := make([]byte, kemSeedSize)
	rand.Read(signSeed) // never fails (crypto/rand)
	rand.Read(kemSeed)
	return newIdentity(signSeed, kemSeed)
}

// newIdentity rebuilds an identity from its two 32-byte seeds.
func newIdentity(signSeed, kemSeed []byte) (*Identity, error) {
	if len(signSeed) != ed25519.SeedSize || len(kemSeed) != kemSeedSize {
		return nil, fmt.Errorf("seal: key seeds must be %d and %d bytes", ed25519.SeedSize, kemSeedSize)
	}
	k, err := kem.NewPrivateKey(kemSeed)
	if err != nil {
		return nil, fmt.Errorf("seal: sealing key: %v", err)
	}
	sign := ed25519.NewKeyFromSeed(signSeed)
	return &Identity{
		sign:    sign,
		kemSeed: append([]byte(nil), kemSeed...),
		kem:     k,
		pub:     newPublic(sign.Public().(ed25519.PublicKey), k.PublicKey()),
	}, nil
}

// Public returns the public half, to give to other devices.
func (id *Identity) Public() Public { return id.pub }

// ID returns the device id.
func (id *Identity) ID() DeviceID { return id.pub.id }

// String returns "identity " and the device id; never key material.
func (id *Identity) String() string { return "identity " + id.pub.id.String() }

// GoString is String, so %#v does not print the keys either.
func (id *Identity) GoString() string { return id.String() }
