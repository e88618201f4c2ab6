package relay

// Crash safety. A crash can leave the newest segment with any prefix of
// the writes since its last fsync, followed by anything (zeros, old bytes,
// part of a record): TestTornTailAtEveryOffset cuts the log at every byte,
// TestGarbageAfterTheLastRecord appends what a crash can leave, and
// TestKillMidWrite kills a child process that is pushing, acking and
// reclaiming space, three times over one directory. Damage a crash cannot
// explain refuses to open (TestDamageBeforeTheTailIsRefused).

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// logOp is one record the test wrote, in log order.
type logOp struct {
	device string
	seq    Seq
	data   []byte // nil: a delete (ack)
}

// logRecord is one record of a segment and where it ends.
type logRecord struct {
	r   record
	end int64
}

// records lists the records of a whole segment, in order, marks included.
func records(t *testing.T, segment []byte) []logRecord {
	t.Helper()
	var recs []logRecord
	sc, err := scanSegment(bytes.NewReader(segment), func(r record, off int64, raw []byte) {
		r.device, r.blob = bytes.Clone(r.device), bytes.Clone(r.blob)
		recs = append(recs, logRecord{r, off + int64(len(raw))})
	})
	if err != nil || sc.bad != nil {
		t.Fatalf("the segment does not scan: %v %v", err, sc.bad)
	}
	return recs
}

// expectAfter is every device's inbox after the records that end at or
// before cut (the header is segHeaderSize bytes), and where the last whole
// record ends.
func expectAfter(recs []logRecord, cut int64) (map[string][]want, int64) {
	inbox := map[string][]want{}
	end := int64(segHeaderSize)
	for _, lr := range recs {
		if lr.end > cut {
			break
		}
		end = lr.end
		o := lr.r
		switch o.kind {
		case kindPush:
			inbox[string(o.device)] = append(inbox[string(o.device)], want{o.seq, o.blob})
		case kindDelete:
			w := inbox[string(o.device)]
			for i := range w {
				if w[i].seq == o.seq {
					inbox[string(o.device)] = append(w[:i:i], w[i+1:]...)
					break
				}
			}
		}
	}
	return inbox, end
}

// writeLog makes a one-segment store holding ops: pushes to two devices
// and acks, each synced before the next so the log is in this order, each
// commit opened by a mark and the log closed by one.
func writeLog(t *testing.T) (segment []byte, recs []logRecord) {
	var ops []logOp
	dir := t.TempDir()
	s := open(t, dir, Options{})
	add := func(dev string, data []byte) Seq {
		seq := push(t, s, dev, data)
		ops = append(ops, logOp{dev, seq, data})
		return seq
	}
	ack := func(dev string, seq Seq) {
		if err := s.Ack(dev, seq); err != nil {
			t.Fatal(err)
		}
		if err := s.flush(); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, logOp{dev, seq, nil})
	}
	a1 := add("alice", []byte("first for alice"))
	add("bob", []byte("first for bob"))
	add("alice", bytes.Repeat([]byte{0xA5}, 100))
	ack("alice", a1)
	b2 := add("bob", []byte("second for bob"))
	add("alice", []byte("third for alice"))
	ack("bob", b2)
	add("bob", []byte{0})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files := segFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("%d segments, want 1", len(files))
	}
	segment, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	recs = records(t, segment)
	var got []logOp
	for _, lr := range recs {
		switch lr.r.kind {
		case kindPush:
			got = append(got, logOp{string(lr.r.device), lr.r.seq, lr.r.blob})
		case kindDelete:
			got = append(got, logOp{string(lr.r.device), lr.r.seq, nil})
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(ops) {
		t.Fatalf("the segment holds %v, want %v", got, ops)
	}
	if n := len(recs); n == 0 || recs[n-1].r.kind != kindMark || recs[n-1].end != int64(len(segment)) {
		t.Fatal("the log does not end with a mark")
	}
	return segment, recs
}

func TestTornTailAtEveryOffset(t *testing.T) {
	segment, recs := writeLog(t)
	for cut := int64(0); cut <= int64(len(segment)); cut++ {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segName(1)), segment[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(dir, Options{Logger: quiet})
		if cut < segHeaderSize {
			// A segment is named only once its header is synced: no
			// crash leaves one shorter, so this is damage.
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("cut at %d, inside the header: %v, want ErrDamaged", cut, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		inboxes, end := expectAfter(recs, cut)
		for _, dev := range []string{"alice", "bob"} {
			checkInbox(t, s, dev, inboxes[dev])
		}
		st := s.Stats()
		if st.TornBytes != cut-end {
			t.Fatalf("cut at %d: %d bytes cut, want %d", cut, st.TornBytes, cut-end)
		}
		// The store goes on from there: a new push lands after what was
		// kept, and all of it is there after another restart.
		seq := push(t, s, "alice", []byte("after the crash"))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = open(t, dir, Options{})
		checkInbox(t, s, "alice", append(inboxes["alice"][:len(inboxes["alice"]):len(inboxes["alice"])], want{seq, []byte("after the crash")}))
		checkInbox(t, s, "bob", inboxes["bob"])
		if st := s.Stats(); st.TornBytes != 0 {
			t.Fatalf("cut at %d: %d more bytes cut at the second open", cut, st.TornBytes)
		}
		s.Close()
	}
}

func TestGarbageAfterTheLastRecord(t *testing.T) {
	segment, recs := writeLog(t)
	inboxes, _ := expectAfter(recs, int64(len(segment)))
	oneMore := appendPush(nil, 99, 1, "alice", []byte("never acknowledged"))
	badCRC := bytes.Clone(oneMore)
	badCRC[len(badCRC)-1] ^= 1
	huge := binary.BigEndian.AppendUint32([]byte{1, 2, 3, 4}, maxRecordBody+1)
	tails := map[string][]byte{
		"zeros":                   make([]byte, 4096),
		"one zero byte":           {0},
		"random":                  randomBytes(rand.New(rand.NewPCG(1, 2)), 300),
		"a record, bad checksum":  badCRC,
		"a record cut short":      oneMore[:len(oneMore)-1],
		"a length past the limit": huge,
		"zeros, then a record":    append(make([]byte, 512), oneMore...),
		"a header of zero length": make([]byte, recHeaderSize),
	}
	for name, tail := range tails {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, segName(1)), append(bytes.Clone(segment), tail...), 0o600); err != nil {
				t.Fatal(err)
			}
			s := open(t, dir, Options{})
			checkInbox(t, s, "alice", inboxes["alice"])
			checkInbox(t, s, "bob", inboxes["bob"])
			if st := s.Stats(); st.TornBytes != int64(len(tail)) {
				t.Fatalf("%d bytes cut, want %d", st.TornBytes, len(tail))
			}
			s.Close()
			// Cut back to the last mark, then closed with another.
			if fi, err := os.Stat(filepath.Join(dir, segName(1))); err != nil || fi.Size() != int64(len(segment)+markSize) {
				t.Fatalf("the segment is %v bytes after the cut and a close, want %d (%v)", fi.Size(), len(segment)+markSize, err)
			}
		})
	}
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// manySegments makes a store with segments of about 512 bytes and returns
// its directory, closed.
func manySegments(t *testing.T) string {
	dir := t.TempDir()
	s := open(t, dir, Options{SegmentBytes: 512})
	for i := range 40 {
		push(t, s, "d", bytes.Repeat([]byte{byte(i)}, 60))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(segFiles(t, dir)); n < 4 {
		t.Fatalf("%d segments, want several", n)
	}
	return dir
}

func TestDamageBeforeTheTailIsRefused(t *testing.T) {
	damage := map[string]func(t *testing.T, dir string) string{
		"a flipped byte in an older segment's record": func(t *testing.T, dir string) string {
			f := segFiles(t, dir)[1]
			flip(t, f, segHeaderSize+30)
			return f
		},
		"an older segment cut short": func(t *testing.T, dir string) string {
			f := segFiles(t, dir)[0]
			fi, _ := os.Stat(f)
			if err := os.Truncate(f, fi.Size()-1); err != nil {
				t.Fatal(err)
			}
			return f
		},
		"a damaged header in an older segment": func(t *testing.T, dir string) string {
			f := segFiles(t, dir)[0]
			flip(t, f, 10)
			return f
		},
		"a damaged header in the newest segment, records after it": func(t *testing.T, dir string) string {
			fs := segFiles(t, dir)
			f := fs[len(fs)-1]
			flip(t, f, 3)
			return f
		},
		"a segment under another's name": func(t *testing.T, dir string) string {
			fs := segFiles(t, dir)
			f := filepath.Join(dir, segName(1000))
			if err := os.Rename(fs[len(fs)-1], f); err != nil {
				t.Fatal(err)
			}
			return f
		},
		"a .seg file that is not a segment": func(t *testing.T, dir string) string {
			f := filepath.Join(dir, "notes.seg")
			if err := os.WriteFile(f, []byte("hello"), 0o600); err != nil {
				t.Fatal(err)
			}
			return f
		},
	}
	for name, spoil := range damage {
		t.Run(name, func(t *testing.T) {
			dir := manySegments(t)
			file := spoil(t, dir)
			s, err := Open(dir, Options{Logger: quiet})
			if err == nil {
				s.Close()
				t.Fatal("opened a damaged store")
			}
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "move that file out") {
				t.Fatalf("error %q: want ErrDamaged naming %s and the way out", err, file)
			}
		})
	}
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x40
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDamageFoundWhenReadingIsDroppedNotDelivered(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{CacheBytes: -1}) // every delivery reads the log
	a := push(t, s, "d", []byte("will be damaged"))
	b := push(t, s, "d", []byte("fine"))
	// Damage a's blob on disk under the running store (the page cache
	// serves the read).
	seg := segFiles(t, dir)[0]
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("X"), segHeaderSize+recHeaderSize+pushFixed+1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	checkInbox(t, s, "d", []want{{b, []byte("fine")}})
	if st := s.Stats(); st.Damaged != 1 || st.Blobs != 1 {
		t.Fatalf("stats %+v", st)
	}
	if err := s.Ack("d", a); !errors.Is(err, ErrNoSuchBlob) {
		t.Fatalf("ack of the dropped blob: %v", err)
	}
}

// A crash right after Ack, before the writer syncs its delete, brings the
// blob back: the only effect of acks being synced lazily.
func TestAckIsDurableWithTheNextCommit(t *testing.T) {
	gate := make(chan struct{}, 1) // the writer passes while the token is in it
	gate <- struct{}{}
	dir := t.TempDir()
	s := open(t, dir, Options{hooks: &hooks{beforeWrite: func() { gate <- <-gate }}})
	a := push(t, s, "d", []byte("a"))
	b := push(t, s, "d", []byte("b"))
	<-gate // the writer stops before its next write
	if err := s.Ack("d", a); err != nil {
		t.Fatal(err)
	}
	checkInbox(t, s, "d", []want{{b, []byte("b")}}) // gone at once for every session
	crashed := copyDir(t, dir)                      // a crash now
	gate <- struct{}{}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	synced := copyDir(t, dir) // a crash after the commit
	s.Close()

	s = open(t, crashed, Options{})
	checkInbox(t, s, "d", []want{{a, []byte("a")}, {b, []byte("b")}})
	s = open(t, synced, Options{})
	checkInbox(t, s, "d", []want{{b, []byte("b")}})
	s = open(t, dir, Options{})
	checkInbox(t, s, "d", []want{{b, []byte("b")}})
}

// The child process of TestKillMidWrite.
const crashHelperEnv = "RELAY_CRASH_HELPER_DIR"

// crashBlob is the blob the helper pushes as number n to device: n, then
// bytes derived from both, 16 to 2,000 bytes long.
func crashBlob(device string, n uint64) []byte {
	h := sha256.Sum256([]byte(fmt.Sprint(device, n)))
	size := 16 + int(binary.BigEndian.Uint16(h[:])%1985)
	b := binary.BigEndian.AppendUint64(make([]byte, 0, size), n)
	for len(b) < size {
		b = append(b, h[:min(len(h), size-len(b))]...)
	}
	return b
}

// crashHelper pushes from 8 goroutines into the store in $RELAY_CRASH_HELPER_DIR,
// acking most blobs soon after, with small segments so space is reclaimed
// all along, and prints "push device n seq" once each Push returned and
// "ack device seq" just before each Ack, until it is killed.
func crashHelper() {
	dir := os.Getenv(crashHelperEnv)
	round, _ := strconv.ParseUint(os.Getenv("RELAY_CRASH_HELPER_ROUND"), 10, 64)
	s, err := Open(dir, Options{Logger: quiet, SegmentBytes: 64 << 10, MaxPushRate: -1, MaxInboxBlobs: 1 << 30, MaxInboxBytes: 1 << 40})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	out := bufio.NewWriterSize(os.Stdout, 0)
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format, args...)
		out.Flush()
		mu.Unlock()
	}
	for g := range 8 {
		go func() {
			device := fmt.Sprint("dev-", g)
			var seqs []Seq
			for n := round << 32; ; n++ {
				seq, err := s.Push(ctxBackground(), device, crashBlob(device, n))
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				say("push %s %d %d\n", device, n, seq)
				seqs = append(seqs, seq)
				if len(seqs) > 2 && n%4 != 0 {
					old := seqs[len(seqs)-3]
					// Said before the call: its delete may be on disk
					// before Ack returns, and a kill in between must
					// not make the blob look lost.
					say("ack %s %d\n", device, old)
					_ = s.Ack(device, old)
				}
			}
		}()
	}
	time.Sleep(time.Minute) // the parent kills it long before
	os.Exit(3)
}

func TestKillMidWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	type pushed struct {
		device string
		n      uint64
	}
	acked := map[Seq]bool{}
	all := map[Seq]pushed{}
	r := rand.New(rand.NewPCG(7, 7))
	for round := range 3 {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), crashHelperEnv+"="+dir, fmt.Sprint("RELAY_CRASH_HELPER_ROUND=", round))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAt := 2000 + r.IntN(3000)
		sc := bufio.NewScanner(stdout)
		lines := 0
		for sc.Scan() {
			if lines++; lines == killAt {
				cmd.Process.Kill() // SIGKILL, mid-write more often than not
			}
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 4 && f[0] == "push":
				n, _ := strconv.ParseUint(f[2], 10, 64)
				seq, _ := strconv.ParseUint(f[3], 10, 64)
				all[Seq(seq)] = pushed{f[1], n}
			case len(f) == 3 && f[0] == "ack":
				seq, _ := strconv.ParseUint(f[2], 10, 64)
				acked[Seq(seq)] = true
			}
		}
		if err := cmd.Wait(); err == nil || lines < killAt {
			t.Fatalf("round %d: the helper stopped by itself after %d lines: %v\n%s", round, lines, err, stderr.String())
		}

		s := open(t, dir, Options{})
		checkCounts(t, s)
		seen := map[Seq]bool{}
		for g := range 8 {
			device := fmt.Sprint("dev-", g)
			for _, b := range inboxOf(t, s, device) {
				n := binary.BigEndian.Uint64(b.Data)
				if !bytes.Equal(b.Data, crashBlob(device, n)) {
					t.Fatalf("round %d: seq %d of %s is not a blob that was pushed", round, b.Seq, device)
				}
				if p, ok := all[b.Seq]; ok && (p.device != device || p.n != n) {
					t.Fatalf("round %d: seq %d is %s #%d, was pushed as %s #%d", round, b.Seq, device, n, p.device, p.n)
				}
				seen[b.Seq] = true
			}
		}
		lost := 0
		for seq := range all {
			if !acked[seq] && !seen[seq] {
				lost++
			}
		}
		if lost > 0 {
			t.Fatalf("round %d: %d acknowledged pushes, not acked by their device, are missing", round, lost)
		}
		st := s.Stats()
		t.Logf("round %d: killed after %d lines; %d pushes acknowledged so far, %d acked; the store holds %d blobs in %d segments, %d bytes cut from the tail",
			round, lines, len(all), len(acked), st.Blobs, st.Segments, st.TornBytes)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
