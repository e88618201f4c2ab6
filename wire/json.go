package wire

import (
	"bytes"
	"encoding/json"
)

// JSON encodes v as encoding/json does but without HTML escaping: '<',
// '>' and '&' stay as they are, so a JSON value (a json.RawMessage, a
// state value, service metadata) keeps its bytes and its size through a
// round trip — json.Marshal would turn each of them into six bytes.
func JSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
