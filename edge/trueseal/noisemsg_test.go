package trueseal

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestNoiseMessagesAreLengthPrefixedUpToMaxNoiseMessage(t *testing.T) {
	msg := bytes.Repeat([]byte{7}, MaxNoiseMessage)
	wire := appendMessage(nil, msg)
	if len(wire) != 2+MaxNoiseMessage || wire[0] != 0xff || wire[1] != 0xff {
		t.Fatalf("prefix % x, %d bytes", wire[:2], len(wire))
	}
	got, err := readMessage(bytes.NewReader(wire), nil)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("the largest message: %d bytes, %v", len(got), err)
	}
	// MaxFrameBytes of plaintext and its tag make exactly the largest one.
	if MaxFrameBytes+TagBytes != MaxNoiseMessage {
		t.Fatalf("MaxFrameBytes %d + tag does not fill a message", MaxFrameBytes)
	}
}

func TestNoiseMessageReaderRefusesEmptyAndCutMessages(t *testing.T) {
	if _, err := readMessage(bytes.NewReader([]byte{0, 0}), nil); !errors.Is(err, ErrEmptyMessage) {
		t.Errorf("empty: %v", err)
	}
	if _, err := readMessage(bytes.NewReader([]byte{0, 3, 1, 2}), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut body: %v", err)
	}
	if _, err := readMessage(bytes.NewReader([]byte{0}), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut prefix: %v", err)
	}
	if _, err := readMessage(bytes.NewReader(nil), nil); !errors.Is(err, io.EOF) {
		t.Errorf("nothing: %v", err)
	}
}
