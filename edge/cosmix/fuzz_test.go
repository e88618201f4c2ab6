package cosmix

// Whatever one WebSocket text message holds, the ingress decoder answers
// with a frame or a *FrameError, never a panic, and a frame it accepts
// encodes to bytes it reads back the same.

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		registerFrame, callFrame, "", "---\n---\n", "---\n---", "hello", "---\ncommand: x\n",
		"---\nrc: 10\nerror: boom\n---\n", "---\n a: b\nk:v\n: x\nj: {\n---\nbody", "---\nx: 1\nx: 2\n---\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrFrame) {
				t.Fatalf("%q: error %v is not ErrFrame", data, err)
			}
			return
		}
		if m.Check() != nil {
			return // a header kept raw (lenient) that cannot be written back
		}
		again, err := Decode(Encode(m))
		if err != nil {
			t.Fatalf("%q: encoded %q does not decode: %v", data, Encode(m), err)
		}
		if again.Len() != m.Len() || string(again.Body()) != string(m.Body()) {
			t.Fatalf("%q: read back as %v, was %v", data, again, m)
		}
	})
}

// What an app on the verified profile receives never holds a
// broker_principal line in any spelling: cosmix-lib-client scans the
// header block for one (before its parser, up to the first "\n---\n")
// and believes it. Whatever frame a peer writes, stripped and encoded as
// the adapter forwards it (always with a header or more: type, topic), or
// published as a topic frame by a busbar node, has none.
func FuzzForwardedFramesCarryNoPrincipal(f *testing.F) {
	for _, s := range []string{
		callFrame, "---\nbroker_principal: {}\n---\n", "---\nBROKER_PRINCIPAL: x\nbroker_principal: {}\n---\nbroker_principal: body\n",
		"---\nbRoKeR_pRiNcIpAl: {\"version\":1}\ncommand: greet\n---\n", "---\nbroker_principal : x\n---\n", "---\nbroker_principal:x",
		// A topic frame whose claim is on a line the parse skips.
		"---\nbroker_principal:{}\ntopic: news\n---\nx\n", "---\nbroker_principal : {}\ntopic: news\n---\n",
		"---\n broker_principal: {}\ntopic: news\n---\n", "---\nBroker_Principal:\ttopic: news\ntopic: news\n---\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		outs := []string{string(topicDelivery("news", data))}
		if m, err := Decode(data); err == nil {
			stripStamped(m)
			m.Set("type", "request")
			outs = append(outs, string(Encode(m)))
		}
		for i, out := range outs {
			content, ok := strings.CutPrefix(out, "---\n")
			if !ok {
				t.Fatalf("%q is forwarded as %q", data, out)
			}
			headers, _, _ := strings.Cut(content, "\n---\n")
			for line := range strings.Lines(headers) {
				k, _, ok := strings.Cut(line, ":")
				if ok && strings.EqualFold(strings.TrimSpace(k), PrincipalHeader) {
					t.Fatalf("%q is forwarded as %q", data, out)
				}
				// A topic delivery's origin header is noded's stamp, or none.
				if i == 0 && ok && slices.ContainsFunc(originHeaders, func(h string) bool { return strings.EqualFold(strings.TrimSpace(k), h) }) &&
					strings.TrimSuffix(line, "\n") != originHeader+": "+originLocal {
					t.Fatalf("%q is delivered as %q", data, out)
				}
			}
		}
	})
}
