package relay

// Fuzz targets for every decoder of the store's bytes: a record, a segment
// header, and a whole segment as Open scans it (fed through a reader, so
// records straddle its buffer). What decodes must encode back to the same
// bytes; nothing may panic.

import (
	"bufio"
	"bytes"
	"io"
	"testing"
)

func seedRecords() [][]byte {
	return [][]byte{
		appendPush(nil, 1, 1_700_000_000_000_000_000, "alice", []byte("sealed")),
		appendPush(nil, 1<<40, -1, "d", make([]byte, 300)),
		appendDelete(nil, 7, "bob-laptop"),
		appendDelete(nil, 1, "x"),
		appendMark(nil, 42, segHeaderSize),
		make([]byte, recHeaderSize),
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, r := range seedRecords() {
		f.Add(r)
		f.Add(r[:len(r)-1])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := decodeRecord(b)
		if err != nil {
			return
		}
		if n > len(b) {
			t.Fatalf("length %d past the %d bytes", n, len(b))
		}
		var again []byte
		switch r.kind {
		case kindPush:
			again = appendPush(nil, r.seq, r.pushed, string(r.device), r.blob)
		case kindDelete:
			again = appendDelete(nil, r.seq, string(r.device))
		default:
			again = appendMark(nil, r.seq, r.at)
			if !isMarkAt(b, r.at) {
				t.Fatalf("decoded a mark that isMarkAt does not take: %+v", r)
			}
		}
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("decoded %+v, which encodes to % x, not % x", r, again, b[:n])
		}
		if r.seq == 0 || r.kind != kindMark && !validDevice(r.device) || r.kind == kindPush && (len(r.blob) == 0 || len(r.blob) > MaxBlobBytes) {
			t.Fatalf("decoded a record that breaks the rules: %+v", r)
		}
	})
}

func FuzzSegmentHeader(f *testing.F) {
	f.Add(appendSegHeader(nil, segHeader{num: 1, nextSeq: 1}))
	f.Add(appendSegHeader(nil, segHeader{num: 1 << 50, nextSeq: 99}))
	f.Add([]byte("BBRLOG"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeSegHeader(b)
		if err != nil {
			return
		}
		if again := appendSegHeader(nil, h); !bytes.Equal(again, b[:segHeaderSize]) {
			t.Fatalf("decoded %+v, which encodes to % x, not % x", h, again, b[:segHeaderSize])
		}
	})
}

// FuzzScanSegment feeds whole segments to the scan Open runs: it must stop
// at the first byte that is not a record, report every record before it
// with its offset, and never read past what it was given.
func FuzzScanSegment(f *testing.F) {
	hdr := appendSegHeader(nil, segHeader{num: 3, nextSeq: 10})
	var whole []byte
	whole = append(whole, hdr...)
	whole = appendMark(whole, 9, int64(len(whole)))
	for _, r := range seedRecords()[:5] {
		whole = append(whole, r...)
	}
	f.Add(whole)
	f.Add(whole[:len(whole)-5])
	f.Add(append(bytes.Clone(whole), 0, 0, 0, 0, 0, 0, 0, 0))
	f.Add(hdr)
	f.Add(hdr[:10])
	f.Fuzz(func(t *testing.T, b []byte) {
		var offs []int64
		sc, err := scanSegment(bytes.NewReader(b), func(r record, off int64, raw []byte) {
			if _, n, err := decodeRecord(b[off:]); err != nil || n != len(raw) || !bytes.Equal(raw, b[off:off+int64(n)]) {
				t.Fatalf("record at %d: %v", off, err)
			}
			offs = append(offs, off)
		})
		if err != nil {
			t.Fatalf("a read from memory failed: %v", err)
		}
		if sc.end > int64(len(b)) || sc.bad == nil && sc.end != int64(len(b)) {
			t.Fatalf("end %d of %d bytes, bad %v", sc.end, len(b), sc.bad)
		}
		if sc.end == 0 {
			if len(offs) > 0 || sc.bad == nil {
				t.Fatal("records without a header")
			}
			return
		}
		// Every record back to back from the header to end.
		at := int64(segHeaderSize)
		for _, off := range offs {
			if off != at {
				t.Fatalf("record at %d, want %d", off, at)
			}
			n, _ := recordLen(b[off:])
			at += int64(n)
		}
		if at != sc.end {
			t.Fatalf("records end at %d, scan says %d", at, sc.end)
		}
		// readRecord through a small buffer agrees with decodeRecord.
		br := bufio.NewReaderSize(bytes.NewReader(b[segHeaderSize:]), 16)
		var buf []byte
		for range offs {
			_, raw, err := readRecord(br, buf)
			if err != nil {
				t.Fatalf("readRecord: %v", err)
			}
			buf = raw
		}
		if _, _, err := readRecord(br, buf); (err == io.EOF) != (sc.bad == nil) {
			t.Fatalf("after the records: %v, scan says %v", err, sc.bad)
		}
	})
}
