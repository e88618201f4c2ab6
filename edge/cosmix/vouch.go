package cosmix

// broker_principal between native connections. noded stamps, on what a
// verified Unix client receives, the kernel-verified identity of the
// Unix connection that sent it; the client hands it to the app as
// VerifiedCommand::trusted_context. busbar stamps it only where it knows
// the sender is one of its own native connections: a call or event of
// one to another, and the reply. The sending session gives the call (or
// its reply) a voucher, a random single-use token, and the receiving
// session stamps the principal only when it redeems that token and the
// busbar message came from the voucher's own node (the broker's
// authenticated From). A voucher seen elsewhere (a busbar service that
// takes cosmix:call, a tap) cannot be replayed from another node, nor
// twice.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// MaxPrincipalBytes bounds a broker_principal value: cosmix-lib-bus's
// MAX_PRINCIPAL_BYTES. A native connection whose principal would be
// longer (a very long broker name) is refused 403 at the upgrade, as
// noded refuses it.
const MaxPrincipalBytes = 4096

// MaxVouchers is how many vouchers one native connection may have
// unredeemed (calls and events to apps that never redeem them, such as
// busbar services); past it the oldest is withdrawn, and its call, if
// it is still delivered, arrives unstamped.
const MaxVouchers = 2 * DefaultMaxCalls

// vouchHeader carries a reply's voucher inside the response frame a
// native service's session returns to the calling session; the caller's
// session removes it, and a service's own is replaced.
const vouchHeader = "busbar-vouch"

// principal is the value of PrincipalHeader (cosmix-lib-bus's
// BrokerPrincipal, assurance local-unix, no session).
type principal struct {
	Version      int       `json:"version"`
	Assurance    string    `json:"assurance"`
	OwnerNode    string    `json:"owner_node"`
	UnixUID      uint32    `json:"unix_uid"`
	UnixGID      uint32    `json:"unix_gid"`
	PeerPID      uint32    `json:"peer_pid"`
	BrokerEpoch  string    `json:"broker_epoch"`
	ConnectionID string    `json:"connection_id"`
	Session      *struct{} `json:"session"`
}

// stampFor is the principal of a native connection of peer, its
// connection id fresh.
func (s *Server) stampFor(peer PeerCred) (string, error) {
	var id [16]byte
	_, _ = rand.Read(id[:])
	p := principal{Version: 1, Assurance: "local-unix", OwnerNode: s.cfg.BrokerName,
		UnixUID: peer.UID, UnixGID: peer.GID, PeerPID: uint32(max(peer.PID, 0)),
		BrokerEpoch: s.epoch, ConnectionID: hex.EncodeToString(id[:])}
	if p.OwnerNode == "" {
		p.OwnerNode = noded
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	if len(b) > MaxPrincipalBytes {
		return "", fmt.Errorf("cosmix: the principal of a native connection is %d bytes, over the limit of %d", len(b), MaxPrincipalBytes)
	}
	return string(b), nil
}

// vouch issues a voucher for something sess sends, or "" when sess is
// not a native connection.
func (s *Server) vouch(sess *session) string {
	if s == nil || sess.stamp == "" {
		return ""
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	v := hex.EncodeToString(b[:])
	s.vmu.Lock()
	defer s.vmu.Unlock()
	s.vouchers[v] = sess
	sess.vouched = append(sess.vouched, v)
	if len(sess.vouched) > MaxVouchers {
		delete(s.vouchers, sess.vouched[0])
		sess.vouched = sess.vouched[1:]
	}
	return v
}

// redeem takes voucher v, once, and returns the principal of the native
// connection that issued it when from, the authenticated source of the
// busbar message that carried it, is that connection's node and it is
// still connected; else "".
func (s *Server) redeem(v, from string) string {
	if s == nil || v == "" {
		return ""
	}
	s.vmu.Lock()
	sess := s.vouchers[v]
	delete(s.vouchers, v)
	s.vmu.Unlock()
	if sess == nil || sess.ctx.Err() != nil || from != sess.bc.Node()+".bus" {
		return ""
	}
	return sess.stamp
}

// withdraw ends the vouchers of a session that ended.
func (s *Server) withdraw(sess *session) {
	if s == nil {
		return
	}
	s.vmu.Lock()
	defer s.vmu.Unlock()
	for _, v := range sess.vouched {
		delete(s.vouchers, v)
	}
	sess.vouched = nil
}
