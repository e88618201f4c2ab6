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
// what and where; ParseLenient skips defective lines and lists them in a
// ParseReport; Parse skips them silently. Structural problems (no opening or
// closing "---" line) and oversize input are errors in every mode.
//
// # Streams
//
// On a byte stream each frame is preceded by its length as a 4-byte
// big-endian integer, so the body is byte-exact; see Reader and Writer. The
// text parser, by contrast, trims trailing whitespace from the body.
//
// docs/protocol.md in the repository is the full specification, with
// byte-level examples.
package wire
