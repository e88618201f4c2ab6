// Package auth decides who a connection is and what it may do: it
// authenticates principals (process identities), checks which node names a
// principal may claim, and checks per-channel and per-namespace
// permissions. It uses only the standard library.
//
// # Channels and patterns
//
// Channel names are '.'-separated tokens of [A-Za-z0-9_-], e.g.
// "orders.created", or in MoonBridge's namespaced form "namespace:path"
// (lower-case [a-z0-9_.-] on each side of exactly one ':', e.g.
// "myplugin:events"), at most MaxChannelLen bytes. The first token "bus"
// is reserved for the broker's control traffic (ValidControlChannel).
//
// Permission patterns are NATS-style: "*" matches one token, ">" as the
// last token matches one or more. Namespaced channels have namespaced
// patterns ("myplugin:*", "*:events"); the two forms never cross, except
// that ">" alone matches every channel of both. Wildcards never match the
// "bus" first token, so ">" grants every channel except control ones; only
// an explicit "bus...." pattern reaches those.
//
// # State namespaces
//
// Replicated state has three actions of its own, each with its own list,
// matched against namespace names with the same pattern syntax
// (Pattern.MatchNamespace, Permissions.AllowsNamespace): state_read (get,
// dump, watch), state_write (set and delete; the namespace's ownership
// still applies) and state_admin (create a namespace, becoming its owner,
// and open its keys to other writers). A principals-file entry that names
// none of them predates them; Load gives it a default (see Load).
//
// # Node patterns
//
// Principal.Nodes lists which node names (DNS labels: 1..63 of [a-z0-9-],
// no leading or trailing hyphen) the principal may claim: "*" for any,
// "worker-*" for that prefix plus at least one byte, or an exact name.
//
// # Principals file
//
// Load reads JSON like this (mode 0600; unknown fields are errors):
//
//	{"principals": [
//	  {"name": "local",
//	   "secret_hash": "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
//	   "nodes": ["*"],
//	   "permissions": {"send": [">"], "request": [">"], "publish": [">"],
//	                   "subscribe": [">"], "handle": [">"],
//	                   "state_read": [">"], "state_write": [">"], "state_admin": [">"]}},
//	  {"name": "billing",
//	   "public_key": "ed25519:<base64 of 32 bytes>",
//	   "nodes": ["billing-*"],
//	   "permissions": {"handle": ["billing.>"], "subscribe": ["orders.*"],
//	                   "state_read": ["cfg.*", "billing"], "state_write": ["billing"],
//	                   "state_admin": ["billing"]}}
//	]}
//
// The file holds secret hashes and decides who may do what, so Load refuses
// it (ErrInsecureFile) if group or others may read or write it.
//
// # Proofs
//
// A secret principal presents a generated secret (32 random bytes); the
// store keeps only its SHA-256 and compares in constant time. A fast hash is
// fine because the secret has 256 bits of entropy and no dictionary exists.
// A public-key principal signs SignedMessage(nonce, node) with ed25519,
// binding the signature to the server's fresh nonce and the node claimed.
//
// Unknown principal, wrong secret and bad signature all return the same
// "auth: bad credentials" error so clients cannot probe for names; Reason
// extracts the detail for the server log.
//
// Bootstrap creates a working "local" principal and matching client
// credentials on first run.
package auth
