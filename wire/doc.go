// Package wire is busbar's protocol core: the message, its text frame, the
// three parse modes, validation, limits, return codes, addresses and the
// length-prefixed stream framing. It does no I/O of its own beyond reading and
// writing frames on an io.Reader / io.Writer, and imports nothing outside the
// standard library, so every other layer (transport, broker, client, tools)
// builds on it.
//
// # The message
//
// A Message is a set of string headers, kept sorted by key, plus a body of
// bytes. Its text form is the one cosmix-lib-bus defines:
//
//	---
//	command: noded.ping
//	from: probe
//	id: 1
//	to: noded
//	type: request
//	---
//	{"detail":true}
//
// The empty frame "---\n---\n" is a heartbeat.
//
// # Parsing
//
// ParseStrict refuses any defective header line with a *ParseError that says
// what and where; ParseLenient lists every defect in a ParseReport; Parse
// says nothing. Both follow cosmix's rule: a defect of the line skips it, a
// defect of the value (a JSON-shaped value that is not JSON,
// DefectKind.OfValue) keeps the header with its raw value. Structural
// problems (no opening or closing "---" line) and oversize input are errors
// in every mode.
//
// # Streams
//
// On a byte stream each frame is preceded by its length as a 4-byte
// big-endian integer, so the body is byte-exact; see Reader and Writer. The
// text parser, by contrast, trims trailing whitespace from the body.
//
// # Responses and control traffic
//
// A response's return code is in its rc header (RC; ResponseRC reads it).
// Handshake, subscriptions, receipts, discovery and replicated state are
// ordinary messages on commands under ControlPrefix ("bus."): the Cmd…
// constants, the Result a receipt or a failed response carries in
// HeaderResult, and the JSON bodies (Info, Hello, Welcome, NodeInfo,
// NodeResult, Announcement, ServiceInfo, ServiceEvent).
//
// docs/protocol.md in the repository is the full specification, with
// byte-level examples; docs/messaging.md and docs/discovery.md specify the
// control exchanges.
package wire
