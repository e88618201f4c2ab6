package relay

// Damage a crash cannot explain: every byte of a small store flipped in
// turn, after a clean close and after a crash; a segment cut to nothing;
// sequence numbers after a torn tail.

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openDamaged opens dir and says whether it was refused as damaged with
// the way out; any other failure fails the test.
func openDamaged(t *testing.T, dir, what string) (*Store, bool) {
	t.Helper()
	s, err := Open(dir, Options{Logger: quiet})
	if err == nil {
		return s, false
	}
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "move that file out") {
		t.Fatalf("%s: %v, want ErrDamaged with the way out", what, err)
	}
	return nil, true
}

// inboxesOf reads every inbox the test knows of.
func inboxesOf(t *testing.T, s *Store, devices ...string) map[string][]want {
	got := map[string][]want{}
	for _, d := range devices {
		for _, b := range inboxOf(t, s, d) {
			got[d] = append(got[d], want{b.Seq, b.Data})
		}
	}
	return got
}

func sameInboxes(a, b map[string][]want) bool {
	for _, m := range []map[string][]want{a, b} {
		for d := range m {
			if len(a[d]) != len(b[d]) {
				return false
			}
			for i := range a[d] {
				if a[d][i].seq != b[d][i].seq || !bytes.Equal(a[d][i].data, b[d][i].data) {
					return false
				}
			}
		}
	}
	return true
}

func TestEveryFlippedByteIsRefusedOrLosesNothing(t *testing.T) {
	segment, recs := writeLog(t)
	full, _ := expectAfter(recs, int64(len(segment)))
	served := 0
	for off := range segment {
		for _, mask := range []byte{0x01, 0xff} {
			dir := t.TempDir()
			b := bytes.Clone(segment)
			b[off] ^= mask
			if err := os.WriteFile(filepath.Join(dir, segName(1)), b, 0o600); err != nil {
				t.Fatal(err)
			}
			s, refused := openDamaged(t, dir, "flipped byte")
			if refused {
				continue
			}
			served++
			// Served: only the closing mark may have been cut, and every
			// acknowledged blob is there, byte for byte.
			if got := inboxesOf(t, s, "alice", "bob"); !sameInboxes(got, full) {
				t.Fatalf("byte %d ^ %#x: served %v, want %v", off, mask, got, full)
			}
			if st := s.Stats(); st.TornBytes > markSize || off < len(segment)-markSize {
				t.Fatalf("byte %d ^ %#x: opened, cutting %d bytes", off, mask, st.TornBytes)
			}
			s.Close()
		}
	}
	if served == 0 {
		t.Fatal("no flip was served: a damaged closing mark should be cut like a torn write")
	}
}

func TestEveryFlippedByteOfManySegmentsIsRefusedOrLosesNothing(t *testing.T) {
	src := t.TempDir()
	s := open(t, src, Options{SegmentBytes: 200})
	for i := range 9 {
		seq := push(t, s, "d", bytes.Repeat([]byte{byte(i)}, 40))
		if i%3 == 1 {
			if err := s.Ack("d", seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	full := inboxesOf(t, s, "d")
	s.Close()
	files := segFiles(t, src)
	// How many segments are left depends on when the writer reclaimed the
	// acked records' room (a busy machine batches differently); the six
	// live records alone fill more than one 200-byte segment.
	if len(files) < 2 {
		t.Fatalf("%d segments, want several", len(files))
	}
	for fi, path := range files {
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for off := range orig {
			dir := copyDir(t, src)
			b := bytes.Clone(orig)
			b[off] ^= 0xff
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(path)), b, 0o600); err != nil {
				t.Fatal(err)
			}
			s, refused := openDamaged(t, dir, "flipped byte")
			if refused {
				continue
			}
			if got := inboxesOf(t, s, "d"); !sameInboxes(got, full) {
				t.Fatalf("segment %d byte %d: served %d blobs, want %d", fi, off, len(got["d"]), len(full["d"]))
			}
			s.Close()
		}
	}
}

// After a crash the last write may be torn, so damage past the last mark
// is cut; damage before it is in records that were synced and refused.
func TestDamageBeforeTheLastMarkIsRefusedAfterACrash(t *testing.T) {
	live := t.TempDir()
	s := open(t, live, Options{})
	var pushed []want
	for i := range 6 {
		blob := bytes.Repeat([]byte{byte('a' + i)}, 20+i)
		pushed = append(pushed, want{push(t, s, "d", blob), blob})
	}
	crashed := copyDir(t, live) // what a crash now leaves: no closing mark
	s.Close()
	path := filepath.Join(crashed, segName(1))
	segment, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	recs := records(t, segment)
	lastMark := int64(-1)
	for i, lr := range recs {
		if lr.r.kind == kindMark {
			lastMark = int64(segHeaderSize)
			if i > 0 {
				lastMark = recs[i-1].end
			}
		}
	}
	if recs[len(recs)-1].r.kind != kindPush || lastMark < 0 {
		t.Fatal("want a log whose last commit is a push after a mark")
	}
	for off := range segment {
		dir := t.TempDir()
		b := bytes.Clone(segment)
		b[off] ^= 0xff
		if err := os.WriteFile(filepath.Join(dir, segName(1)), b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, refused := openDamaged(t, dir, "flipped byte")
		if refused {
			continue
		}
		got := inboxesOf(t, s, "d")["d"]
		s.Close()
		if int64(off) < lastMark {
			t.Fatalf("byte %d, before the last mark at %d: opened with %d blobs", off, lastMark, len(got))
		}
		// The last write, which a crash may have torn: everything before it
		// is there.
		if len(got) < len(pushed)-1 || !sameInboxes(map[string][]want{"d": got}, map[string][]want{"d": pushed[:len(got)]}) {
			t.Fatalf("byte %d: served %v", off, got)
		}
	}
}

func TestSegmentCutToNothingIsRefused(t *testing.T) {
	t.Run("the only segment", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir, Options{})
		push(t, s, "d", []byte("acknowledged"))
		s.Close()
		if err := os.Truncate(filepath.Join(dir, segName(1)), 0); err != nil {
			t.Fatal(err)
		}
		if _, refused := openDamaged(t, dir, "empty segment"); !refused {
			t.Fatal("opened a store whose only segment is empty")
		}
	})
	t.Run("the newest of several", func(t *testing.T) {
		dir := manySegments(t)
		fs := segFiles(t, dir)
		if err := os.Truncate(fs[len(fs)-1], 0); err != nil {
			t.Fatal(err)
		}
		if _, refused := openDamaged(t, dir, "empty segment"); !refused {
			t.Fatal("opened a store whose newest segment is empty")
		}
	})
	t.Run("a segment being made is not one", func(t *testing.T) {
		dir := manySegments(t)
		fs := segFiles(t, dir)
		tmp := filepath.Join(dir, segName(1000)+tmpSuffix) // a crash before its header was synced
		if err := os.WriteFile(tmp, []byte("BBR"), 0o600); err != nil {
			t.Fatal(err)
		}
		s := open(t, dir, Options{SegmentBytes: 512})
		defer s.Close()
		if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the leftover is still there: %v", err)
		}
		if n := len(segFiles(t, dir)); n != len(fs) {
			t.Fatalf("%d segments, want %d", n, len(fs))
		}
		if st := s.Stats(); st.Blobs != 40 {
			t.Fatalf("%d blobs, want 40", st.Blobs)
		}
	})
}

// A torn tail takes unacknowledged pushes with it; their sequence numbers
// are not given out again, whether the commit's mark survived or not.
func TestSequenceNumbersAreNotReusedAfterATornTail(t *testing.T) {
	live := t.TempDir()
	s := open(t, live, Options{})
	push(t, s, "d", []byte("one"))
	push(t, s, "d", []byte("two"))
	last := push(t, s, "d", []byte("torn by the crash"))
	crashed := copyDir(t, live)
	s.Close()
	segment, err := os.ReadFile(filepath.Join(crashed, segName(1)))
	if err != nil {
		t.Fatal(err)
	}
	recs := records(t, segment)
	lastEnd := recs[len(recs)-1].end // the last push's record ends the log
	markAt := recs[len(recs)-3].end  // the last commit's mark starts here
	for _, cut := range []int64{lastEnd - 1, markAt + markSize + 3, markAt + 3, markAt + 1} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segName(1)), segment[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		s := open(t, dir, Options{})
		if st := s.Stats(); st.Blobs != 2 {
			t.Fatalf("cut at %d: %d blobs, want the 2 before the torn write", cut, st.Blobs)
		}
		if seq := push(t, s, "d", []byte("after")); seq <= last {
			t.Fatalf("cut at %d: a new push got seq %d, which the torn push %d had", cut, seq, last)
		}
		s.Close()
	}
}
