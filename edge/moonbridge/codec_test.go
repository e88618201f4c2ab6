package moonbridge

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// h decodes hex written with spaces and '|' for readability.
func h(t testing.TB, s string) []byte {
	t.Helper()
	s = strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// Byte strings of the protocol, written out by hand from MoonBridge's
// Wire.java and MessageCodec.java, not by this package's encoder.
const (
	uuidA   = "00112233445566778899aabbccddeeff" // 00112233-4455-6677-8899-aabbccddeeff
	uuidB   = "0123456789abcdef0123456789abcdef"
	chanHex = "0006 6d623a636861" // "mb:cha", 6 bytes
	proxyEP = "01"
	aliceEP = "00 0005 616c696365" // backend("alice")
)

func uuid(t testing.TB, s string) UUID {
	var u UUID
	copy(u[:], h(t, s))
	return u
}

func ep(e Endpoint) *Endpoint { return &e }

type golden struct {
	name  string
	frame string
	value any
}

func goldens(t testing.TB) []golden {
	a, b := uuid(t, uuidA), uuid(t, uuidB)
	var nonce [NonceBytes]byte
	for i := range nonce {
		nonce[i] = byte(i)
	}
	var sig [SignatureBytes]byte
	for i := range sig {
		sig[i] = 0xf0 | byte(i&0xf)
	}
	gs := []golden{
		{"hello", "01 00000003 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", Hello{Version: 3, Nonce: nonce}},
		{"register", "02 0002 6931 | 0005 616c696365 | 000d 7463703a2f2f683a3235353635 | 0024 " +
			hex.EncodeToString([]byte("0a0b0c0d-0000-4000-8000-000000000001")) + " | 0001 6b | " +
			"f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff",
			Register{InstanceID: "i1", Name: "alice", Address: "tcp://h:25565", Generation: "0a0b0c0d-0000-4000-8000-000000000001", KeyID: "k", Signature: sig}},
		{"registered", "03 0000000000000007 " + uuidA, Registered{Epoch: 7, ProxyEpoch: a}},
		{"heartbeat", "04", TypeHeartbeat},
		{"pong", "05", TypePong},
		{"goodbye", "06", TypeGoodbye},
		{"message send to proxy", "09 0000000000000001 0000000000001388 | " + uuidA + " 01 " + chanHex + " " + aliceEP +
			" 01 " + proxyEP + " 00 | 00000003 010203",
			MessageFrame{OperationID: 1, TimeoutMillis: 5000, Message: Message{ID: a, Kind: KindEvent, Channel: "mb:cha",
				Source: BackendEndpoint("alice"), Target: ep(ProxyEndpoint()), Payload: []byte{1, 2, 3}}}},
		{"message publish", "09 7fffffffffffffff 000000000000ea60 | " + uuidA + " 01 " + chanHex + " " + aliceEP + " 00 00 | 00000000",
			MessageFrame{OperationID: 1<<63 - 1, TimeoutMillis: 60000, Message: Message{ID: a, Kind: KindEvent, Channel: "mb:cha",
				Source: BackendEndpoint("alice"), Payload: []byte{}}}},
		{"message request to backend", "09 0000000000000002 0000000000000001 | " + uuidB + " 02 " + chanHex + " " + proxyEP +
			" 01 " + aliceEP + " 00 | 00000001 ff",
			MessageFrame{OperationID: 2, TimeoutMillis: 1, Message: Message{ID: b, Kind: KindRequest, Channel: "mb:cha",
				Source: ProxyEndpoint(), Target: ep(BackendEndpoint("alice")), Payload: []byte{0xff}}}},
		{"response reply", "0a 0000000000000002 02 | " + uuidA + " 03 " + chanHex + " " + aliceEP + " 01 " + proxyEP +
			" 01 " + uuidB + " | 00000002 6f6b",
			Response{OperationID: 2, Type: ResponseReply, Reply: &Message{ID: a, Kind: KindReply, Channel: "mb:cha",
				Source: BackendEndpoint("alice"), Target: ep(ProxyEndpoint()), ReplyTo: &b, Payload: []byte("ok")}}},
		{"response publish", "0a 0000000000000003 03 " + uuidA + " 0002 | " + proxyEP + " 02 | " + aliceEP + " 01",
			Response{OperationID: 3, Type: ResponsePublish, MessageID: a, Results: []NodeResult{
				{ProxyEndpoint(), NoSubscriber}, {BackendEndpoint("alice"), Accepted}}}},
		{"response publish empty", "0a 0000000000000003 03 " + uuidA + " 0000",
			Response{OperationID: 3, Type: ResponsePublish, MessageID: a}},
	}
	for r := Accepted; r <= Failed; r++ {
		gs = append(gs, golden{"send result " + r.String(), "0a 0000000000000004 01 0" + string("01234567"[r]),
			Response{OperationID: 4, Type: ResponseSend, Result: r}})
	}
	for c := CodeNotConnected; c <= CodeProtocolError; c++ {
		gs = append(gs, golden{"error " + c.String(), "0a 0000000000000005 04 0" + string("012345678"[c]) + " 0003 626164",
			Response{OperationID: 5, Type: ResponseError, Err: Error{Code: c, Detail: "bad"}}})
	}
	gs = append(gs, golden{"error no detail", "0a 0000000000000005 04 05 0000",
		Response{OperationID: 5, Type: ResponseError, Err: Error{Code: CodeClosed}}})
	return gs
}

func encode(v any) ([]byte, error) {
	switch v := v.(type) {
	case Hello:
		return EncodeHello(v), nil
	case Register:
		return EncodeRegister(v)
	case Registered:
		return EncodeRegistered(v)
	case byte:
		return EncodeEmpty(v), nil
	case MessageFrame:
		return EncodeMessage(v)
	case Response:
		return EncodeResponse(v)
	}
	panic("unknown frame value")
}

func TestGoldenFrames(t *testing.T) {
	for _, g := range goldens(t) {
		t.Run(g.name, func(t *testing.T) {
			want := h(t, g.frame)
			got, err := encode(g.value)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoded\n%x\nwant\n%x", got, want)
			}
			v, err := Decode(want)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(v, g.value) {
				t.Fatalf("decoded %#v\nwant %#v", v, g.value)
			}
		})
	}
}

func TestUUIDText(t *testing.T) {
	u := uuid(t, uuidA)
	if s := u.String(); s != "00112233-4455-6677-8899-aabbccddeeff" {
		t.Fatal(s)
	}
	if p, err := ParseUUID("00112233-4455-6677-8899-AABBCCDDEEFF"); err != nil || p != u {
		t.Fatal(p, err)
	}
	for _, bad := range []string{"", "00112233445566778899aabbccddeeff", "00112233-4455-6677-8899-aabbccddeefg", "0011223-34455-6677-8899-aabbccddeeff"} {
		if _, err := ParseUUID(bad); !errors.Is(err, ErrBadUUID) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// The HMAC covers the nonce, then the five strings as REGISTER carries
// them: computed here from the bytes, independently of Sign.
func TestSignature(t *testing.T) {
	var nonce [NonceBytes]byte
	for i := range nonce {
		nonce[i] = byte(255 - i)
	}
	secret := []byte("0123456789abcdef0123456789abcdef")
	r := Register{InstanceID: "i1", Name: "alice", Address: "tcp://h:1", Generation: "1-2-3-4-5", KeyID: "k"}
	m := hmac.New(sha256.New, secret)
	m.Write(nonce[:])
	m.Write(h(t, "0002 6931 0005 616c696365 0009 7463703a2f2f683a31 0009 312d322d332d342d35 0001 6b"))
	copy(r.Signature[:], m.Sum(nil))
	if got := Sign(secret, nonce, &r); got != r.Signature {
		t.Fatalf("Sign %x, want %x", got, r.Signature)
	}
	if !Verify(secret, nonce, &r) {
		t.Fatal("Verify refused the right signature")
	}
	r.Signature[31] ^= 1
	if Verify(secret, nonce, &r) {
		t.Fatal("Verify took a wrong signature")
	}
	nonce[0] ^= 1
	r.Signature = Sign(secret, [NonceBytes]byte{}, &r)
	if Verify(secret, nonce, &r) {
		t.Fatal("Verify took a signature over another nonce")
	}
}

func TestReadFrame(t *testing.T) {
	in := h(t, "00000001 04 | 00000003 0a0b0c")
	r := iotest.OneByteReader(bytes.NewReader(in))
	for _, want := range []string{"04", "0a0b0c"} {
		f, err := ReadFrame(r)
		if err != nil || hex.EncodeToString(f) != want {
			t.Fatalf("got %x %v, want %s", f, err, want)
		}
	}
	if _, err := ReadFrame(r); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	if _, err := ReadFrame(bytes.NewReader(h(t, "00000003 0a"))); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated frame: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader(h(t, "0000"))); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated prefix: %v", err)
	}
}

// The frame length at and past each edge: 1 and MaxFrameBytes pass, 0
// and MaxFrameBytes+1 are refused before any body is read.
func TestFrameLengthEdges(t *testing.T) {
	for _, n := range []int{1, MaxFrameBytes} {
		frame := bytes.Repeat([]byte{4}, n)
		var buf bytes.Buffer
		if err := WriteFrame(&buf, frame); err != nil {
			t.Fatal(n, err)
		}
		got, err := ReadFrame(&buf)
		if err != nil || len(got) != n {
			t.Fatalf("%d: %d bytes, %v", n, len(got), err)
		}
	}
	for _, n := range []uint32{0, MaxFrameBytes + 1, 1 << 31} {
		p := []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		if _, err := ReadFrame(bytes.NewReader(p)); !errors.Is(err, ErrFrameSize) {
			t.Errorf("length %d: %v, want ErrFrameSize", n, err)
		}
	}
	for _, n := range []int{0, MaxFrameBytes + 1} {
		if err := WriteFrame(io.Discard, make([]byte, n)); !errors.Is(err, ErrFrameSize) {
			t.Errorf("writing %d bytes: %v, want ErrFrameSize", n, err)
		}
	}
}

func eventFrame(channel, source string, payload int) MessageFrame {
	src := BackendEndpoint(source)
	return MessageFrame{OperationID: 1, TimeoutMillis: 1, Message: Message{Kind: KindEvent, Channel: channel, Source: src,
		Target: ep(ProxyEndpoint()), Payload: make([]byte, payload)}}
}

// Each limit of a message, at its edge and one past it, through both the
// encoder and the decoder.
func TestMessageLimits(t *testing.T) {
	ch := func(n int) string { return "a:" + strings.Repeat("b", n-2) }
	name := func(n int) string { return strings.Repeat("n", n) }
	cases := []struct {
		name     string
		ok, over MessageFrame
	}{
		{"channel", eventFrame(ch(MaxChannelBytes), "a", 0), eventFrame(ch(MaxChannelBytes+1), "a", 0)},
		{"payload", eventFrame("a:b", "a", MaxPayloadBytes), eventFrame("a:b", "a", MaxPayloadBytes+1)},
		{"backend name", eventFrame("a:b", name(MaxNodeBytes), 0), eventFrame("a:b", name(MaxNodeBytes+1), 0)},
	}
	for _, c := range cases {
		b, err := EncodeMessage(c.ok)
		if err != nil {
			t.Fatalf("%s at the limit: %v", c.name, err)
		}
		if _, err := DecodeMessage(b); err != nil {
			t.Fatalf("%s at the limit: decode: %v", c.name, err)
		}
		if _, err := EncodeMessage(c.over); err == nil {
			t.Fatalf("%s past the limit encoded", c.name)
		}
		// The same frame past the limit, built by stretching the one at it.
		if over := stretch(t, b, c.name); over != nil {
			if _, err := DecodeMessage(over); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s past the limit decoded: %v", c.name, err)
			}
		}
	}
	for _, ms := range []int64{0, MaxTimeoutMillis + 1, -1} {
		f := eventFrame("a:b", "a", 0)
		f.TimeoutMillis = ms
		if _, err := EncodeMessage(f); err == nil {
			t.Errorf("timeout %d encoded", ms)
		}
		f.TimeoutMillis = 1
		b, _ := EncodeMessage(f)
		copy(b[9:17], h(t, hex.EncodeToString([]byte{byte(uint64(ms) >> 56), byte(uint64(ms) >> 48), byte(uint64(ms) >> 40), byte(uint64(ms) >> 32), byte(uint64(ms) >> 24), byte(uint64(ms) >> 16), byte(uint64(ms) >> 8), byte(ms)})))
		if _, err := DecodeMessage(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("timeout %d decoded: %v", ms, err)
		}
	}
}

// stretch returns frame with the field named grown by one byte (and its
// length prefix adjusted), or nil when the frame would pass MaxFrameBytes.
func stretch(t *testing.T, frame []byte, field string) []byte {
	t.Helper()
	// Offsets in an eventFrame: type 1, op 8, timeout 8, id 16, kind 1.
	const chanAt = 1 + 8 + 8 + 16 + 1
	var at int
	chLen := int(frame[chanAt])<<8 | int(frame[chanAt+1])
	switch field {
	case "channel":
		at = chanAt
	case "backend name":
		at = chanAt + 2 + chLen + 1
	case "payload":
		n := len(frame)
		out := append(append([]byte{}, frame...), 0)
		p := n - MaxPayloadBytes - 4
		out[p], out[p+1], out[p+2], out[p+3] = 0, 1, 0, 1 // 65537
		return out
	}
	n := int(frame[at])<<8 | int(frame[at+1])
	out := append([]byte{}, frame[:at]...)
	out = append(out, byte((n+1)>>8), byte(n+1))
	out = append(out, frame[at+2:at+2+n]...)
	out = append(out, frame[at+2+n-1]) // repeat the last byte: still valid characters
	return append(out, frame[at+2+n:]...)
}

func TestPublishResultLimit(t *testing.T) {
	mk := func(n int) Response {
		p := Response{OperationID: 1, Type: ResponsePublish}
		for i := range n {
			p.Results = append(p.Results, NodeResult{BackendEndpoint(strings.Repeat("x", i%100+1) + string(rune('a'+i/100))), Accepted})
		}
		return p
	}
	b, err := EncodeResponse(mk(MaxPublishResults))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := DecodeResponse(b); err != nil || len(p.Results) != MaxPublishResults {
		t.Fatal(len(p.Results), err)
	}
	if _, err := EncodeResponse(mk(MaxPublishResults + 1)); err == nil {
		t.Fatal("257 results encoded")
	}
	b[1+8+1+16+1]++ // count 257, one entry short: refused on the count itself
	if _, err := DecodeResponse(b); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "exceed") {
		t.Fatalf("count 257: %v", err)
	}
}

func TestDetailLimit(t *testing.T) {
	p := Response{OperationID: 1, Type: ResponseError, Err: Error{Code: CodeRejected, Detail: strings.Repeat("d", MaxDetailBytes)}}
	b, err := EncodeResponse(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeResponse(b); err != nil || got.Err.Detail != p.Err.Detail {
		t.Fatal(err)
	}
	over := append(append([]byte{}, b[:11]...), 0x04, 0x01)
	over = append(append(over, b[13:]...), 'd')
	if _, err := DecodeResponse(over); !errors.Is(err, ErrMalformed) {
		t.Fatalf("detail of 1025 bytes: %v", err)
	}
	// A longer detail is cut on a rune boundary, as the Java client does.
	p.Err.Detail = strings.Repeat("d", MaxDetailBytes-1) + "é"
	if b, err := EncodeResponse(p); err != nil || len(b) != 1+8+1+1+2+MaxDetailBytes-1 {
		t.Fatal(len(b), err)
	}
}

func TestRegisterLimits(t *testing.T) {
	base := Register{InstanceID: "i", Name: "n", Address: "a", Generation: "1-1-1-1-1", KeyID: "k"}
	fields := []struct {
		name string
		max  int
		set  func(*Register, string)
	}{
		{"instance id", MaxInstanceID, func(r *Register, s string) { r.InstanceID = s }},
		{"backend name", MaxBackendName, func(r *Register, s string) { r.Name = s }},
		{"game address", MaxGameAddress, func(r *Register, s string) { r.Address = s }},
		{"key id", MaxKeyID, func(r *Register, s string) { r.KeyID = s }},
	}
	for _, f := range fields {
		r := base
		f.set(&r, strings.Repeat("x", f.max))
		b, err := EncodeRegister(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeRegister(b); err != nil {
			t.Fatalf("%s at %d: %v", f.name, f.max, err)
		}
		f.set(&r, strings.Repeat("x", f.max+1))
		b = rawRegister(r)
		if _, err := DecodeRegister(b); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s at %d: %v", f.name, f.max+1, err)
		}
		f.set(&r, "")
		if _, err := EncodeRegister(r); err == nil {
			t.Fatalf("empty %s encoded", f.name)
		}
	}
	for gen, ok := range map[string]bool{
		"0a0b0c0d-0000-4000-8000-000000000001": true, "1-1-1-1-1": true, strings.Repeat("f", 16) + "-1-1-1-1": true,
		strings.Repeat("f", 17) + "-1-1-1-1": false, "1-1-1-1": false, "1-1-1-1-": false, "g-1-1-1-1": false, "1--1-1-1": false,
	} {
		r := base
		r.Generation = gen
		b, _ := EncodeRegister(r)
		if _, err := DecodeRegister(b); (err == nil) != ok {
			t.Errorf("generation %q: %v", gen, err)
		}
	}
}

// rawRegister encodes r without the encoder's checks.
func rawRegister(r Register) []byte {
	w := newWriter(TypeRegister, 1)
	for _, s := range []string{r.InstanceID, r.Name, r.Address, r.Generation, r.KeyID} {
		w.str(s)
	}
	return append(w.b, r.Signature[:]...)
}

// Bytes that are not a frame of the protocol: each a *FrameError.
func TestMalformed(t *testing.T) {
	ev := "09 0000000000000001 0000000000000001 " + uuidA + " 01 " + chanHex + " " + aliceEP
	for name, s := range map[string]string{
		"unknown type":         "07",
		"trailing byte":        "04 00",
		"short hello":          "01 00000003 00",
		"boolean 2":            ev + " 02 00 00000000",
		"unknown kind":         "09 0000000000000001 0000000000000001 " + uuidA + " 04 " + chanHex + " " + aliceEP + " 00 00 00000000",
		"reply as message":     "09 0000000000000001 0000000000000001 " + uuidA + " 03 " + chanHex + " " + aliceEP + " 01 01 01 " + uuidB + " 00000000",
		"request no target":    "09 0000000000000001 0000000000000001 " + uuidA + " 02 " + chanHex + " " + aliceEP + " 00 00 00000000",
		"event with reply-to":  ev + " 00 01 " + uuidB + " 00000000",
		"operation id 0":       "09 0000000000000000 0000000000000001 " + uuidA + " 01 " + chanHex + " " + aliceEP + " 00 00 00000000",
		"negative payload":     ev + " 00 00 ffffffff",
		"payload short":        ev + " 00 00 00000002 01",
		"bad channel":          "09 0000000000000001 0000000000000001 " + uuidA + " 01 0003 4d3a61 " + aliceEP + " 00 00 00000000",
		"blank backend":        "09 0000000000000001 0000000000000001 " + uuidA + " 01 " + chanHex + " 00 0002 2020 00 00 00000000",
		"empty backend":        "09 0000000000000001 0000000000000001 " + uuidA + " 01 " + chanHex + " 00 0000 00 00 00000000",
		"invalid utf8":         "09 0000000000000001 0000000000000001 " + uuidA + " 01 " + chanHex + " 00 0001 ff 00 00 00000000",
		"unknown send result":  "0a 0000000000000001 01 08",
		"send result 0":        "0a 0000000000000001 01 00",
		"unknown error code":   "0a 0000000000000001 04 09 0000",
		"unknown response":     "0a 0000000000000001 05",
		"reply not a reply":    "0a 0000000000000001 02 " + uuidA + " 01 " + chanHex + " " + aliceEP + " 01 01 00 00000000",
		"duplicate publish":    "0a 0000000000000001 03 " + uuidA + " 0002 01 01 01 01",
		"negative epoch":       "03 ffffffffffffffff " + uuidA,
		"register no sig":      "02 0001 69 0001 6e 0001 61 0009 312d312d312d312d31 0001 6b",
		"register bad gen":     "02 0001 69 0001 6e 0001 61 0001 31 0001 6b " + uuidA + uuidA,
		"register empty":       "02 0000 0001 6e 0001 61 0009 312d312d312d312d31 0001 6b " + uuidA + uuidA,
		"response op negative": "0a 8000000000000000 01 01",
	} {
		if _, err := Decode(h(t, s)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := Decode(nil); !errors.Is(err, ErrFrameSize) {
		t.Errorf("empty frame: %v", err)
	}
}

func TestValidChannel(t *testing.T) {
	for name, ok := range map[string]bool{
		"a:b": true, "my.mod:chat.v2": true, "a-b_c:d": true, "0:9": true,
		"": false, ":b": false, "a:": false, "a:b:c": false, "A:b": false, ".a:b": false, "a:_b": false, "ab": false, "a:b/c": false,
	} {
		if ValidChannel(name) != ok {
			t.Errorf("%q: want %v", name, ok)
		}
	}
}
