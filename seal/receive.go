package seal

import "crypto/ed25519"

// A device proves to a relay that it holds its key before the relay
// delivers its inbox: it signs the connection's handshake nonce and its
// device id under a domain prefix of their own, so the proof is good for
// that connection only and can never pass for a signed message
// (docs/durable.md#the-relay-on-the-broker-connection).

const receiveDomain = "busbar durable receive\x00"

// receiveChallenge is what a receive proof signs.
func receiveChallenge(nonce []byte, id DeviceID) []byte {
	m := make([]byte, 0, len(receiveDomain)+len(nonce)+DeviceIDSize)
	m = append(m, receiveDomain...)
	m = append(m, nonce...)
	return append(m, id[:]...)
}

// ProveReceive signs the relay's nonce as this device.
func (id *Identity) ProveReceive(nonce []byte) []byte {
	return ed25519.Sign(id.sign, receiveChallenge(nonce, id.ID()))
}

// VerifyReceive reports whether sig proves, for the connection whose
// handshake nonce is nonce, that its peer holds pub's signing key.
func VerifyReceive(pub Public, nonce, sig []byte) bool {
	return len(sig) == ed25519.SignatureSize && ed25519.Verify(pub.SigningKey(), receiveChallenge(nonce, pub.ID()), sig)
}
