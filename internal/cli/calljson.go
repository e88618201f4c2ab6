package cli

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"busbar/client"
	"busbar/wire"
)

// callJSON is one line of `busbar pub|send|req --json`: who answered,
// with what result (a receipt's, a candidate's, OK for a reply, or the
// request error's kind), the message id, the rc and error text of a
// failure, and the milliseconds from sending to the answer; a reply's
// payload as sub --json prints one.
type callJSON struct {
	Node          string  `json:"node"`
	Result        string  `json:"result"`
	ID            string  `json:"id,omitempty"`
	RC            int     `json:"rc"`
	Error         string  `json:"error,omitempty"`
	Elapsed       float64 `json:"elapsed"`
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 []byte  `json:"payload_base64,omitempty"`
}

// errorJSON is the line of a call that failed with err (to: its target).
func errorJSON(err error, to string, start time.Time) callJSON {
	j := callJSON{Node: to, Result: "ERROR", RC: int(wire.RCFailure), Error: err.Error(), Elapsed: sinceMS(start)}
	var re *client.RequestError
	if errors.As(err, &re) {
		j.Result, j.RC, j.Error = string(re.Kind), int(re.RC), re.Text
		if re.From != "" {
			j.Node = strings.TrimSuffix(re.From, ".bus")
		}
	}
	return j
}

func sinceMS(start time.Time) float64 {
	return float64(time.Since(start).Microseconds()) / 1000
}

func printCallJSON(w io.Writer, j callJSON) {
	b, _ := json.Marshal(j)
	_, _ = w.Write(append(b, '\n'))
}

// payloadJSON is a payload as a string when it is UTF-8, else for base64.
func payloadJSON(p []byte) (*string, []byte) {
	if utf8.Valid(p) {
		s := string(p)
		return &s, nil
	}
	return nil, p
}
