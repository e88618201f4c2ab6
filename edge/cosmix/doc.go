// Package cosmix lets cosmix apps connect to busbar unchanged: it speaks
// the client protocol of cosmix-noded, the node broker of the cosmix
// desktop, to cosmix-lib-client's NodedClient, and makes each connection an
// ordinary busbar node.
//
// # The wire
//
// A cosmix client opens a WebSocket (ws://HOST:PORT/ws) and sends one
// cosmix frame (seed 004: "---", "key: value" lines in key order, "---",
// the body) per text message. Decode reads one with cosmix's lenient
// parse; Encode writes one as cosmix's to_wire does:
//
//	client → busbar  ---\ncommand: noded.register\nfrom: service-a\nid: 1\nto: noded\ntype: request\n---\n
//	busbar → client  ---\ncommand: noded.register\nfrom: noded\nid: 1\nrc: 0\ntype: response\n---\n{"registered": "service-a"}\n
//
// A message that is not a frame is answered "rc: 10" with "error: Invalid
// Bus message: …", and the connection is kept; the empty frame
// "---\n---\n" is a heartbeat, answered as noded answers it: rc 10,
// "Unknown noded command", the command named being empty. A message over
// MaxMessageBytes closes the connection (1009).
//
// # What it translates
//
// noded.register / deregister announce and withdraw a busbar service of
// the connection's node (channel CallChannel); noded.list / info / ping
// answer from busbar's registry; a request reaches a cosmix app (as a
// CallRequest on CallChannel), a busbar service (on the command's channel)
// or a port, and its reply comes back with the caller's id and rc;
// topic.subscribe / unsubscribe / publish are busbar subscriptions and
// publications on TopicNamespace channels, the last frame retained, and
// topic.list / subscriber_count / clear answer from them.
//
// # The native Unix socket
//
// Server.ListenUnix and ServeUnix serve cosmix-lib-client's connect_unix:
// an owner-only socket whose connections are admitted only from the
// broker's own OS user (CheckPeer, on the kernel's peer credentials) and
// log in as Config.Owner; noded.ping then advertises the native-session
// profile ("native-session": "1" and the socket's path) on both
// listeners. A frame an app receives carries a PrincipalHeader only when
// the broker vouches for its sender: another native connection (a call,
// its reply, an event).
//
// # The door
//
// Both listeners stand behind the process's shared door (Config.Door,
// package edge): the HTTP server is edge.HTTPServer (its header bound and
// timeouts, edge.Listener's accept retries), each connection holds a
// place of the broker's login pool until its upgrade or its close, an
// upgrade must send its first message within Config.FirstFrameTimeout,
// and every refusal a peer can cause is written through
// Door.Refusals and counted by door and reason (Stats, NewCollector).
//
// The whole contract (what a cosmix user sets, what differs from noded,
// the limits) is docs/cosmix.md.
package cosmix
