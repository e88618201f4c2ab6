package wire

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Warning is one finding of Validate: a header that parses but does not
// mean what the protocol expects. Warnings never stop a message.
type Warning struct {
	Header string
	Msg    string
}

func (w Warning) String() string { return w.Header + ": " + w.Msg }

// Validate reports, in header order, unknown headers (neither core nor
// busbar's HeaderResult), a type outside
// ValidTypes, args or json that are not JSON, and an rc that is not a u8 or
// a ttl that is not a u32.
func Validate(m *Message) []Warning {
	var out []Warning
	warn := func(h, format string, args ...any) {
		out = append(out, Warning{Header: h, Msg: fmt.Sprintf(format, args...)})
	}
	for k, v := range m.Headers() {
		switch k {
		case HeaderType:
			if !IsValidType(v) {
				warn(k, "%q is not a message type (want one of %v)", v, validTypes)
			}
		case HeaderArgs, HeaderJSON:
			if !json.Valid([]byte(v)) {
				warn(k, "value is not valid JSON")
			}
		case HeaderRC:
			if _, err := strconv.ParseUint(v, 10, 8); err != nil {
				warn(k, "%q is not a number from 0 to 255", v)
			}
		case HeaderTTL:
			if _, err := strconv.ParseUint(v, 10, 32); err != nil {
				warn(k, "%q is not a number from 0 to %d", v, uint32(1<<32-1))
			}
		default:
			if !IsCoreHeader(k) && k != HeaderResult {
				warn(k, "unknown header")
			}
		}
	}
	return out
}
