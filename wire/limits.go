package wire

import "slices"

// Limits every parser and stream reader enforces. The names in comments are
// the ones docs/protocol.md#limits gives them.
const (
	// MaxHeaders is the most header lines one frame may carry (MAX_HEADERS).
	// Line MaxHeaders+1 is a defect, and parsing of headers stops there.
	MaxHeaders = 4096

	// MaxMessageBytes is the largest frame accepted, header block and body
	// together, excluding the stream length prefix (MAX_MESSAGE_BYTES).
	MaxMessageBytes = 16 << 20
)

// ProtocolVersion is the value of the "bus" header this implementation
// speaks. A peer announcing another version is refused at the handshake.
const ProtocolVersion = "1"

// ProtocolMin and ProtocolMax are the protocol versions a broker of this
// implementation accepts, announced in bus.info (Info.Min, Info.Max): a
// client whose version is outside them fails at the handshake and knows
// which versions it would need (the seed's relayVersionUnsupported{min,
// max} for a device).
const (
	ProtocolMin = 1
	ProtocolMax = 1
)

// Core header names (docs/protocol.md#the-message). Any other header is
// "unknown" to Validate.
const (
	HeaderBus       = "bus"       // protocol version
	HeaderType      = "type"      // one of ValidTypes
	HeaderID        = "id"        // framework-assigned message id
	HeaderFrom      = "from"      // authenticated source
	HeaderTo        = "to"        // target address
	HeaderCommand   = "command"   // channel or command name
	HeaderArgs      = "args"      // JSON arguments
	HeaderJSON      = "json"      // JSON payload carried in a header
	HeaderReplyTo   = "reply-to"  // id of the request a response answers
	HeaderTTL       = "ttl"       // time to live, a u32
	HeaderError     = "error"     // error text of a failed response
	HeaderTimestamp = "timestamp" // when the message was made
	HeaderRC        = "rc"        // return code, a u8 (see RC)
)

// coreHeaders lists the headers Validate knows, sorted.
var coreHeaders = []string{
	HeaderArgs, HeaderBus, HeaderCommand, HeaderError, HeaderFrom, HeaderID,
	HeaderJSON, HeaderRC, HeaderReplyTo, HeaderTimestamp, HeaderTo, HeaderTTL,
	HeaderType,
}

// CoreHeaders returns the core header names, sorted.
func CoreHeaders() []string { return slices.Clone(coreHeaders) }

// IsCoreHeader reports whether key is one of the core headers.
func IsCoreHeader(key string) bool {
	_, ok := slices.BinarySearch(coreHeaders, key)
	return ok
}

// Message types, the values of the "type" header (VALID_TYPES).
const (
	TypeRequest  = "request"
	TypeResponse = "response"
	TypeEvent    = "event"
	TypeStream   = "stream"
)

var validTypes = []string{TypeRequest, TypeResponse, TypeEvent, TypeStream}

// ValidTypes returns the message types (VALID_TYPES).
func ValidTypes() []string { return slices.Clone(validTypes) }

// IsValidType reports whether typ is one of ValidTypes.
func IsValidType(typ string) bool { return slices.Contains(validTypes, typ) }
