// Package port implements cosmix's ports: small Unix-socket command servers
// a program exposes for scripting, in the ARexx tradition, byte-compatible
// with cosmix's local Port command server and its call_port.
//
// # The exchange
//
// One request per connection. The caller connects, writes one text frame
// (a "command" header, the JSON arguments as the body, followed by a
// newline) and shuts down its write side: end of file delimits the
// request, not busbar's stream length prefix. The port answers with one
// text frame, an "rc" header (and "error" on failure) and a JSON body, then
// closes the connection:
//
//	caller → port   ---\ncommand: greet\n---\n{"name":"ann"}\n   then EOF
//	port → caller   ---\nrc: 0\n---\n{"greeting":"hello ann"}\n then close
//	                ---\nerror: boom\nrc: 10\n---\n              (an application error)
//
// A request with no arguments has no body; an application error has no
// body; headers are written in key order.
//
// # Serving
//
// New builds a Server from a table of commands; every port also answers
// the standard commands help, info and, when the program has a window
// (Config.Activate), activate. Listen creates the socket (in Dir for a
// named port, mode 0700, the socket 0600) and Serve answers on it until
// Close. Reads are bounded in size (Config.MaxRequestBytes) and time
// (Config.ReadTimeout), and at most Config.MaxConns connections are served
// at once: a peer that sends garbage gets an rc 20 reply saying why, and a
// peer that never finishes gets one at its deadline, while other callers
// are served. The accept loop is the edge's (edge.Accept), and
// every refusal goes through Config.Door's refusal log.
//
// # Calling
//
// CallPort (and CallPortTyped) sends one request and reads the reply. An
// rc below RCError is success (RCWarning a warning whose text is kept in
// Reply.Error); an rc of RCError or more is an application error, a *Error
// whose text is the "error" header, else the body's "error" field, else
// the body. Anything else (no socket, a reply that cannot be read, a
// deadline) is a *TransportError, never an *Error.
//
// # The bus
//
// Server.ServeBus answers the port's commands as requests on the channel
// BusChannel(name) ("port:NAME") of a broker connection and announces the
// port as a service, so `busbar req` reaches it too.
//
// The whole contract, with the limits and the CLI verbs, is docs/ports.md.
package port
