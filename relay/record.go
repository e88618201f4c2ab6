package relay

// The log's bytes: segment headers and records (docs/relay-store.md#on-disk-format).
//
// A segment file is a header, then records back to back:
//
//	header, 28 bytes:
//	  [0:6]   magic "BBRLOG"
//	  [6]     format version: 2 (1: a segment written before commit marks; read, never written)
//	  [7]     0
//	  [8:16]  the segment's number, big-endian (its file name is that number, %020d.seg)
//	  [16:24] the next sequence number the store would assign when the segment was made, big-endian
//	  [24:28] CRC-32C (Castagnoli) of bytes 0..24, big-endian
//
//	record:
//	  [0:4]   CRC-32C (Castagnoli) of bytes 4..8+n, big-endian
//	  [4:8]   n, the length of what follows, big-endian
//	  [8]     kind: 1 push, 2 delete, 3 mark
//	  push:   seq (8) | push time, Unix nanoseconds (8) | device length (1) | device | blob (the rest, ≥ 1 byte)
//	  delete: seq (8) | device length (1) | device
//	  mark:   next seq (8) | the mark's own offset in the segment (8)
//
// The checksum covers the length, so a run of zero bytes (what a crash can
// leave past the end of an appended file) is never a record.
//
// A mark opens every group commit's write (and ends the log when the
// store closes): it says that everything before it in the segment was
// synced before it was written, and that every sequence number below its
// next seq has been assigned. Damage before a mark is damage to synced,
// acknowledged records, which no crash explains; a crash can only tear
// what follows the last mark.

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Seq is a blob's sequence number: unique in the store, assigned at push,
// increasing in arrival order, never reused (it continues across restarts).
type Seq uint64

const (
	segMagic      = "BBRLOG"
	segVersion    = 2 // what this version writes
	segVersionOld = 1 // segments without marks: read, never appended to
	segHeaderSize = 28

	kindPush   = 1
	kindDelete = 2
	kindMark   = 3

	recHeaderSize = 8             // CRC and length
	pushFixed     = 1 + 8 + 8 + 1 // kind, seq, time, device length
	deleteFixed   = 1 + 8 + 1     // kind, seq, device length
	markBody      = 1 + 8 + 8     // kind, next seq, offset
	markSize      = recHeaderSize + markBody
	maxRecordBody = pushFixed + MaxDeviceBytes + MaxBlobBytes
	minRecordBody = deleteFixed + 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ValidDevice reports whether id is a device id: 1 to MaxDeviceBytes bytes
// of [A-Za-z0-9._-] (hex, unpadded base64url, UUIDs and node names all
// fit). A push or session for anything else is refused Malformed.
func ValidDevice(id string) error {
	if !validDevice(id) {
		return ErrMalformed
	}
	return nil
}

func validDevice[T string | []byte](id T) bool {
	if len(id) == 0 || len(id) > MaxDeviceBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// segHeader is a segment file's header.
type segHeader struct {
	version byte // 0 when encoding: segVersion
	num     uint64
	nextSeq Seq
}

func appendSegHeader(b []byte, h segHeader) []byte {
	start := len(b)
	b = append(b, segMagic...)
	b = append(b, cmp.Or(h.version, segVersion), 0)
	b = binary.BigEndian.AppendUint64(b, h.num)
	b = binary.BigEndian.AppendUint64(b, uint64(h.nextSeq))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

func decodeSegHeader(b []byte) (segHeader, error) {
	switch {
	case len(b) < segHeaderSize:
		return segHeader{}, fmt.Errorf("segment header of %d bytes, short of %d", len(b), segHeaderSize)
	case string(b[:6]) != segMagic:
		return segHeader{}, errors.New("not a relay segment (bad magic)")
	case crc32.Checksum(b[:24], castagnoli) != binary.BigEndian.Uint32(b[24:28]):
		return segHeader{}, errors.New("segment header checksum mismatch")
	case b[6] != segVersion && b[6] != segVersionOld || b[7] != 0:
		return segHeader{}, fmt.Errorf("segment format %d.%d, this version reads %d.0 and %d.0", b[6], b[7], segVersionOld, segVersion)
	}
	return segHeader{version: b[6], num: binary.BigEndian.Uint64(b[8:16]), nextSeq: Seq(binary.BigEndian.Uint64(b[16:24]))}, nil
}

// record is one decoded record; device and blob alias the decoded bytes.
type record struct {
	kind   byte
	seq    Seq   // a mark's: the next sequence number to assign
	pushed int64 // Unix nanoseconds; push only
	at     int64 // a mark's own offset in its segment
	device []byte
	blob   []byte // push only
}

// pushRecordSize is the size on disk of a push record.
func pushRecordSize(device, blob int) int64 {
	return int64(recHeaderSize + pushFixed + device + blob)
}

func appendPush(b []byte, seq Seq, pushed int64, device string, blob []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(pushFixed+len(device)+len(blob)))
	b = append(b, kindPush)
	b = binary.BigEndian.AppendUint64(b, uint64(seq))
	b = binary.BigEndian.AppendUint64(b, uint64(pushed))
	b = append(b, byte(len(device)))
	b = append(b, device...)
	b = append(b, blob...)
	binary.BigEndian.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
	return b
}

func appendDelete(b []byte, seq Seq, device string) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(deleteFixed+len(device)))
	b = append(b, kindDelete)
	b = binary.BigEndian.AppendUint64(b, uint64(seq))
	b = append(b, byte(len(device)))
	b = append(b, device...)
	binary.BigEndian.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
	return b
}

// appendMark appends a mark that will be at offset at of its segment.
func appendMark(b []byte, next Seq, at int64) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, markBody)
	b = append(b, kindMark)
	b = binary.BigEndian.AppendUint64(b, uint64(next))
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	binary.BigEndian.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
	return b
}

// isMarkAt reports whether b starts with a valid mark that says it is at
// offset at: how a mark is found past damage, where records are no
// longer in step.
func isMarkAt(b []byte, at int64) bool {
	return len(b) >= markSize &&
		binary.BigEndian.Uint32(b[4:8]) == markBody && b[8] == kindMark &&
		int64(binary.BigEndian.Uint64(b[17:25])) == at &&
		binary.BigEndian.Uint64(b[9:17]) != 0 &&
		crc32.Checksum(b[4:markSize], castagnoli) == binary.BigEndian.Uint32(b)
}

// errShort: b ends inside the record (at the end of a log, a torn write).
var errShort = errors.New("record cut short")

// recordLen reads a record's header: its total length, or an error if the
// length is impossible. It needs recHeaderSize bytes.
func recordLen(hdr []byte) (int, error) {
	if len(hdr) < recHeaderSize {
		return 0, errShort
	}
	n := binary.BigEndian.Uint32(hdr[4:8])
	if n < minRecordBody || n > maxRecordBody {
		return 0, fmt.Errorf("record length %d is outside %d..%d", n, minRecordBody, maxRecordBody)
	}
	return recHeaderSize + int(n), nil
}

// decodeRecord decodes the record at the start of b and returns its length.
// It checks everything: length, checksum, kind, field lengths, the device
// id's syntax, the blob's size. errShort means b ends inside the record.
func decodeRecord(b []byte) (r record, n int, err error) {
	if n, err = recordLen(b); err != nil {
		return r, 0, err
	}
	if len(b) < n {
		return r, 0, errShort
	}
	if crc32.Checksum(b[4:n], castagnoli) != binary.BigEndian.Uint32(b) {
		return r, 0, errors.New("record checksum mismatch")
	}
	body := b[recHeaderSize:n]
	r.kind = body[0]
	r.seq = Seq(binary.BigEndian.Uint64(body[1:9]))
	var rest []byte
	switch r.kind {
	case kindPush:
		if len(body) < pushFixed {
			return r, 0, errors.New("push record shorter than its fields")
		}
		r.pushed = int64(binary.BigEndian.Uint64(body[9:17]))
		rest = body[17:]
	case kindDelete:
		rest = body[9:]
	case kindMark:
		if len(body) != markBody {
			return r, 0, fmt.Errorf("mark record of %d bytes, want %d", len(body), markBody)
		}
		if r.seq == 0 {
			return r, 0, errors.New("record with sequence number 0")
		}
		r.at = int64(binary.BigEndian.Uint64(body[9:17]))
		if r.at < segHeaderSize {
			return r, 0, fmt.Errorf("mark says it is at offset %d, inside the segment header", r.at)
		}
		return r, n, nil
	default:
		return r, 0, fmt.Errorf("unknown record kind %d", r.kind)
	}
	dl := int(rest[0])
	if dl > len(rest)-1 {
		return r, 0, errors.New("device id runs past the record")
	}
	r.device = rest[1 : 1+dl]
	if !validDevice(r.device) {
		return r, 0, errors.New("record holds an invalid device id")
	}
	tail := rest[1+dl:]
	switch {
	case r.kind == kindDelete && len(tail) != 0:
		return r, 0, errors.New("delete record with bytes after its device id")
	case r.kind == kindPush && len(tail) == 0:
		return r, 0, errors.New("push record with an empty blob")
	case len(tail) > MaxBlobBytes:
		return r, 0, errors.New("push record with a blob over MaxBlobBytes")
	case r.seq == 0:
		return r, 0, errors.New("record with sequence number 0")
	}
	if r.kind == kindPush {
		r.blob = tail
	}
	return r, n, nil
}

// readRecord reads the next record from r into buf (grown as needed) and
// returns it decoded. io.EOF: r ended at a record boundary; errShort: it
// ended inside one; a *readError: reading failed; any other error: the
// bytes are not a record.
func readRecord(r *bufio.Reader, buf []byte) (rec record, raw []byte, err error) {
	hdr, err := r.Peek(recHeaderSize)
	switch {
	case len(hdr) == 0 && err == io.EOF:
		return rec, buf, io.EOF
	case len(hdr) < recHeaderSize && err == io.EOF:
		return rec, buf, errShort
	case len(hdr) < recHeaderSize:
		return rec, buf, &readError{err}
	}
	n, err := recordLen(hdr)
	if err != nil {
		return rec, buf, err
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return rec, buf, errShort
		}
		return rec, buf, &readError{err}
	}
	rec, _, err = decodeRecord(buf)
	return rec, buf, err
}

// readError is a read that failed, as opposed to bytes that are not a
// record.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }
