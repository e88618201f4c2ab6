package broker

import "busbar/auth"

// Authenticator checks a connection's credential and the node name it
// claims. *auth.Store implements it.
type Authenticator interface {
	Authenticate(c auth.Credential, node string, nonce []byte) (*auth.Principal, error)
}
