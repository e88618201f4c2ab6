package relay

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// Space comes back: segments with nothing live are deleted, and when the
// log holds more dead bytes than live ones the oldest segment's live
// records are copied forward so it can go. Blobs that moved are delivered
// as before, in order, after a restart too.
func TestSpaceIsReclaimed(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4096, MaxPushRate: -1}
	s := open(t, dir, opts)
	var kept []want
	for i := range 600 {
		if i%20 == 0 { // one blob in 20 waits for an offline device
			data := []byte(fmt.Sprint("kept ", i))
			kept = append(kept, want{push(t, s, "offline", data), data})
			continue
		}
		seq := push(t, s, "online", bytes.Repeat([]byte{byte(i)}, 100))
		if err := s.Ack("online", seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s)
	st := s.Stats()
	t.Logf("%+v", st)
	if st.Copied == 0 || st.Segments > 4 || st.DiskBytes > 2*st.LiveBytes+2*opts.SegmentBytes+compactChunk {
		t.Fatalf("%d segments, %d bytes on disk for %d live, %d copied forward: space not reclaimed", st.Segments, st.DiskBytes, st.LiveBytes, st.Copied)
	}
	if n := len(segFiles(t, dir)); n != st.Segments {
		t.Fatalf("%d segment files, Stats says %d", n, st.Segments)
	}
	checkInbox(t, s, "offline", kept)
	s.Close()
	s = open(t, dir, opts)
	checkInbox(t, s, "offline", kept)
	checkInbox(t, s, "online", nil)
}

// The store's files hold the blobs as pushed and nothing else of their
// own but framing: each segment is its header and records, and every byte
// of every record is accounted for (checksum, length, kind, seq, time,
// device id, and a blob byte for byte as pushed). No other file but the
// empty LOCK.
func TestFilesHoldOnlyWhatWasPushed(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{SegmentBytes: 8192, MaxPushRate: -1})
	r := rand.New(rand.NewPCG(3, 4))
	blobs := map[Seq][]byte{}
	devices := map[Seq]string{}
	for i := range 300 {
		dev := fmt.Sprint("device-", i%7)
		blob := randomBytes(r, 1+r.IntN(300))
		seq := push(t, s, dev, blob)
		blobs[seq], devices[seq] = blob, dev
		if i%3 == 0 {
			if err := s.Ack(dev, seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Close()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		path := filepath.Join(dir, de.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if de.Name() == "LOCK" {
			if len(b) != 0 {
				t.Fatalf("LOCK holds %d bytes", len(b))
			}
			continue
		}
		if filepath.Ext(de.Name()) != segSuffix {
			t.Fatalf("a file the store should not have: %s", de.Name())
		}
		accountFor(t, path, b, blobs, devices)
	}
}

func accountFor(t *testing.T, path string, b []byte, blobs map[Seq][]byte, devices map[Seq]string) {
	t.Helper()
	if len(b) < segHeaderSize || string(b[:6]) != "BBRLOG" || b[6] != 2 || b[7] != 0 {
		t.Fatalf("%s: header % x", path, b[:min(len(b), segHeaderSize)])
	}
	off := segHeaderSize // magic, version, segment number, next seq, checksum
	for off < len(b) {
		rec := b[off:]
		n := int(binary.BigEndian.Uint32(rec[4:8])) // after the checksum
		body := rec[8 : 8+n]
		seq := Seq(binary.BigEndian.Uint64(body[1:9]))
		var dev, blob []byte
		switch body[0] {
		case kindMark: // kind, next seq, its own offset
			if len(body) != markBody || int(binary.BigEndian.Uint64(body[9:17])) != off {
				t.Fatalf("%s at %d: a mark of %d bytes saying offset %d", path, off, len(body), binary.BigEndian.Uint64(body[9:17]))
			}
			for s := range blobs {
				if s >= seq && bytes.Contains(b[:off], binary.BigEndian.AppendUint64([]byte{kindPush}, uint64(s))) {
					t.Fatalf("%s at %d: a mark says next seq %d after a push of seq %d", path, off, seq, s)
				}
			}
			off += 8 + n
			continue
		case kindPush: // kind, seq, time, device length, device, blob
			dl := int(body[17])
			dev, blob = body[18:18+dl], body[18+dl:]
			if !bytes.Equal(blob, blobs[seq]) {
				t.Fatalf("%s at %d: seq %d holds %d bytes that are not the blob pushed", path, off, seq, len(blob))
			}
		case kindDelete: // kind, seq, device length, device
			dl := int(body[9])
			dev = body[10 : 10+dl]
			if len(body) != 10+dl {
				t.Fatalf("%s at %d: a delete with %d more bytes", path, off, len(body)-10-dl)
			}
		default:
			t.Fatalf("%s at %d: kind %d", path, off, body[0])
		}
		if string(dev) != devices[seq] {
			t.Fatalf("%s at %d: seq %d names device %q, was pushed to %q", path, off, seq, dev, devices[seq])
		}
		off += 8 + n
	}
}
