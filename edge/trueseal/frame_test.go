package trueseal

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestFramesEncodeToTheirGoldenBytes(t *testing.T) {
	key := bytes.Repeat([]byte{0xab}, KeyBytes)
	cases := []struct {
		name string
		got  []byte
		want string
	}{
		{"heartbeat", AppendFrame(nil, Heartbeat, nil), "0300000000"},
		{"ack", AppendFrame(nil, Ack, nil), "0400000000"},
		{"error", AppendFrame(nil, Error, nil), "0500000000"},
		{"deliverack", AppendFrame(nil, DeliverAck, AppendDeliverBody(nil, 0x0102030405060708, nil)), "06000000080102030405060708"},
		{"deliver", AppendFrame(nil, Deliver, AppendDeliverBody(nil, 7, []byte("hi"))), "020000000a00000000000000076869"},
		{"push", AppendFrame(nil, Push, append(append([]byte(nil), key...), 'x')), "0100000021" + hex.EncodeToString(key) + "78"},
	}
	for _, c := range cases {
		if got := hex.EncodeToString(c.got); got != c.want {
			t.Errorf("%s: % x, want %s", c.name, got, c.want)
		}
	}
}

func TestParseFrameRefusesWhatIsNotOneWholeFrame(t *testing.T) {
	cases := []struct {
		name string
		in   string
		err  error
	}{
		{"empty", "", ErrShortFrame},
		{"header cut", "03000000", ErrShortFrame},
		{"body longer than said", "030000000000", ErrFrameLength},
		{"body shorter than said", "0300000001", ErrFrameTruncated},
		{"type 0", "0000000000", ErrUnknownType},
		{"type 7", "0700000000", ErrUnknownType},
		{"length past u32 sense", "03ffffffff", ErrFrameTruncated},
	}
	for _, c := range cases {
		p, _ := hex.DecodeString(c.in)
		if _, _, err := ParseFrame(p); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
}

func TestFrameOfMaxFrameBytesParsesAndOneMoreDoesNot(t *testing.T) {
	at := AppendFrame(nil, Push, make([]byte, MaxBodyBytes))
	if len(at) != MaxFrameBytes {
		t.Fatalf("frame of MaxBodyBytes is %d bytes, want %d", len(at), MaxFrameBytes)
	}
	if _, body, err := ParseFrame(at); err != nil || len(body) != MaxBodyBytes {
		t.Fatalf("at the edge: %d bytes, %v", len(body), err)
	}
	past := AppendFrame(nil, Push, make([]byte, MaxBodyBytes+1))
	if _, _, err := ParseFrame(past); !errors.Is(err, ErrFrameTooLong) {
		t.Fatalf("past the edge: %v, want ErrFrameTooLong", err)
	}
	if MaxEnvelopeBytes != 65482 {
		t.Fatalf("MaxEnvelopeBytes = %d, want 65482", MaxEnvelopeBytes)
	}
}

func TestPushAndBlobIDBodiesNeedTheirFixedHeads(t *testing.T) {
	if _, _, err := ParsePush(make([]byte, KeyBytes-1)); !errors.Is(err, ErrShortBody) {
		t.Errorf("push of 31 bytes: %v", err)
	}
	if k, env, err := ParsePush(make([]byte, KeyBytes)); err != nil || len(k) != KeyBytes || len(env) != 0 {
		t.Errorf("push of 32 bytes: %d %d %v", len(k), len(env), err)
	}
	if _, _, err := ParseBlobID(make([]byte, BlobIDBytes-1)); !errors.Is(err, ErrShortBody) {
		t.Errorf("blob id of 7 bytes: %v", err)
	}
	if id, rest, err := ParseBlobID([]byte{0, 0, 0, 0, 0, 0, 1, 0}); err != nil || id != 256 || len(rest) != 0 {
		t.Errorf("blob id of 8 bytes: %d %d %v", id, len(rest), err)
	}
}

func TestFramesRoundTripWhateverTheirBody(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		typ := Type(1 + r.IntN(6))
		body := make([]byte, r.IntN(2000))
		for i := range body {
			body[i] = byte(r.Uint32())
		}
		gt, gb, err := ParseFrame(AppendFrame(nil, typ, body))
		if err != nil || gt != typ || !bytes.Equal(gb, body) {
			t.Fatalf("%v %d bytes: got %v %d bytes, %v", typ, len(body), gt, len(gb), err)
		}
	}
}

func TestAppendFrameAllocatesNothingIntoRoom(t *testing.T) {
	buf := make([]byte, 0, 64)
	body := []byte("0123456789")
	if n := testing.AllocsPerRun(100, func() { _ = AppendFrame(buf[:0], Deliver, body) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
