package wire

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestSeqRangesRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		seqs []uint64
		body string
	}{
		{[]uint64{7}, "7"},
		{[]uint64{3, 4, 5, 6, 7, 8, 9, 12}, "3-9,12"},
		{[]uint64{1, 3, 5}, "1,3,5"},
		{[]uint64{18446744073709551615}, "18446744073709551615"},
	} {
		rs := SeqRanges(tc.seqs)
		if got := string(AppendSeqRanges(nil, rs)); got != tc.body {
			t.Errorf("%v: body %q, want %q", tc.seqs, got, tc.body)
		}
		back, err := ParseSeqRanges([]byte(tc.body))
		if err != nil || !reflect.DeepEqual(back, rs) {
			t.Errorf("%q: parsed %v, %v; want %v", tc.body, back, err, rs)
		}
	}
}

func TestParseSeqRangesRefuses(t *testing.T) {
	for _, body := range []string{
		"", ",", "0", "07", "-3", "3-", "-", "9-3", "1,,2", "a", "1-2-3", " 1", "+1",
		"18446744073709551616", "1_0", "3-9,", strings.Repeat("9", 21),
	} {
		if rs, err := ParseSeqRanges([]byte(body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, %v; want ErrMalformed", body, rs, err)
		}
	}
}

// MaxAckRanges ranges are one ack; one more is refused.
func TestParseSeqRangesLimit(t *testing.T) {
	parts := make([]string, MaxAckRanges+1)
	for i := range parts {
		parts[i] = fmt.Sprint(2*i + 1)
	}
	if rs, err := ParseSeqRanges([]byte(strings.Join(parts[:MaxAckRanges], ","))); err != nil || len(rs) != MaxAckRanges {
		t.Fatalf("%d ranges: %d, %v", MaxAckRanges, len(rs), err)
	}
	if _, err := ParseSeqRanges([]byte(strings.Join(parts, ","))); !errors.Is(err, ErrMalformed) {
		t.Fatalf("%d ranges: %v, want ErrMalformed", MaxAckRanges+1, err)
	}
}

// FuzzParseSeqRanges: any body either is refused or parses to ranges that
// print back to a body parsing to the same ranges.
func FuzzParseSeqRanges(f *testing.F) {
	for _, s := range []string{"7", "3-9,12", "1,3,5", "9-3", "", "0", "18446744073709551615-18446744073709551615"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rs, err := ParseSeqRanges(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("%q: an error not matching ErrMalformed: %v", body, err)
			}
			return
		}
		if len(rs) == 0 || len(rs) > MaxAckRanges {
			t.Fatalf("%q: %d ranges", body, len(rs))
		}
		for _, r := range rs {
			if r.Lo == 0 || r.Hi < r.Lo {
				t.Fatalf("%q: range %v", body, r)
			}
		}
		again, err := ParseSeqRanges(AppendSeqRanges(nil, rs))
		if err != nil || !reflect.DeepEqual(again, rs) {
			t.Fatalf("%q: printed and parsed again: %v, %v; want %v", body, again, err, rs)
		}
	})
}

// AppendDurableDeliver makes the frame AppendFrame makes of the message,
// and refuses a blob too large for a frame as AppendFrame does.
func TestAppendDurableDeliver(t *testing.T) {
	blob := []byte("BBSL\x01 sealed")
	want, err := AppendFrame(nil, New(TypeEvent, CmdDurableDeliver).WithHeader(HeaderID, "42").WithBody(blob))
	if err != nil {
		t.Fatal(err)
	}
	got, err := AppendDurableDeliver([]byte("x"), 42, blob)
	if err != nil || string(got) != "x"+string(want) {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
	if _, err := AppendDurableDeliver(nil, 1, make([]byte, MaxMessageBytes)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a blob over the frame limit: %v, want ErrTooLarge", err)
	}
}
