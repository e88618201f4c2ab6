package statestore

// The store on real files: it refuses a store it cannot trust (empty,
// truncated, damaged) with an error and without touching it, never
// panics on one, loads stores written before checksums, and says so when
// bbolt fell back to the previous transaction.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"busbar/auth"
	"busbar/state"
	"busbar/wire"
)

// history is a store written through the store's write path and every
// state it held: history.states[i] after i writes.
type history struct {
	file   []byte
	states [][]state.Snapshot
}

func (h history) final() []state.Snapshot    { return h.states[len(h.states)-1] }
func (h history) previous() []state.Snapshot { return h.states[len(h.states)-2] }

// writer writes to a store as the broker's state service does: decide
// the entry, Put it with the namespace's record, then apply it.
type writer struct {
	t      *testing.T
	st     *Store
	spaces map[string]*state.Namespace
}

func newWriter(t *testing.T, path string) *writer {
	t.Helper()
	st, _, err := Open(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return &writer{t: t, st: st, spaces: map[string]*state.Namespace{}}
}

// write stores d, written by node; a namespace's first write creates it,
// owned by node.
func (w *writer) write(node string, d state.Delta) {
	w.t.Helper()
	n := w.spaces[d.NS]
	if n == nil {
		n = state.New(d.NS, node)
	}
	d.Source = node
	e, err := n.Decide(d)
	if err != nil {
		w.t.Fatalf("write %s %s/%s: %v", node, d.NS, d.Key, err)
	}
	seq := n.Seq() + 1
	if err := w.st.Put(Record{NS: d.NS, Owner: n.Owner(), Seq: seq, Meta: Meta{Epoch: 1, OwnerAt: 1}}, e); err != nil {
		w.t.Fatalf("write %s %s/%s: %v", node, d.NS, d.Key, err)
	}
	w.spaces[d.NS] = n
	n.Commit(e)
	n.Advance()
}

// open opens key of namespace ns for every writer, as its owner does.
func (w *writer) open(ns, key string) {
	w.t.Helper()
	n := w.spaces[ns]
	cur, _ := n.Get(key)
	w.write(n.Owner(), state.Delta{NS: ns, Key: key, Version: cur.Version + 1, Value: cur.Value, Deleted: cur.Deleted, Open: true})
}

// all is every namespace, sorted, as the broker answers them.
func (w *writer) all() []state.Snapshot {
	all := []state.Snapshot{}
	for _, ns := range slices.Sorted(maps.Keys(w.spaces)) {
		all = append(all, w.spaces[ns].Snapshot())
	}
	return all
}

// writeHistory builds a store at a temporary path with a few namespaces,
// owners, an open key written by another node and deletes, and returns
// the file after Close.
func writeHistory(t *testing.T) history {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	w := newWriter(t, path)
	var h history
	write := func(node, ns, key, value string, ver uint64) {
		t.Helper()
		d := state.Delta{NS: ns, Key: key, Version: ver, Deleted: value == ""}
		if value != "" {
			d.Value = json.RawMessage(value)
		}
		w.write(node, d)
		h.states = append(h.states, w.all())
	}
	h.states = append(h.states, w.all())
	write("thermostat", "home", "target", `20.5`, 1)
	write("thermostat", "home", "mode", `"eco"`, 2)
	write("lamp", "lights.kitchen", "on", `true`, 1)
	write("lamp", "lights.kitchen", "level", `{"pct":40,"fade":"slow <&>"}`, 2)
	w.open("home", "target")
	h.states = append(h.states, w.all())
	write("phone", "home", "target", `22`, 5)
	write("thermostat", "home", "mode", "", 3)
	write("phone", "phone.prefs", "theme", `"dark"`, 1)
	write("lamp", "lights.kitchen", "level", `{"pct":75}`, 3)
	if err := w.st.Close(); err != nil {
		t.Fatal(err)
	}
	var err error
	if h.file, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	return h
}

// openStoreFile opens data as a store file and returns every namespace it
// loaded and what it logged.
func openStoreFile(t *testing.T, data []byte) ([]state.Snapshot, string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return openPath(t, path)
}

// openPath opens the store at path and returns every namespace it loaded,
// as the broker holds them, and what it logged.
func openPath(t *testing.T, path string) ([]state.Snapshot, string, error) {
	t.Helper()
	var logged bytes.Buffer
	st, l, err := Open(path, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		return nil, logged.String(), err
	}
	defer st.Close()
	all := []state.Snapshot{}
	for _, snap := range l.Spaces {
		all = append(all, state.FromSnapshot(snap).Snapshot())
	}
	return all, logged.String(), nil
}

// pageLayout reads the page size and the high-water mark (pages in use)
// from the meta page bbolt opens at.
func pageLayout(t *testing.T, file []byte) (pageSize, hwm int) {
	t.Helper()
	pageSize = int(binary.NativeEndian.Uint32(file[pageHeaderSize+8:]))
	m0, _ := readMeta(file)
	m1, _ := readMeta(file[pageSize:])
	m := max(m0.hwm, m1.hwm)
	return pageSize, int(m)
}

// openPathOnly opens the store at path and closes it, for its error.
func openPathOnly(path string) error {
	st, _, err := Open(path, slog.New(slog.DiscardHandler))
	if err == nil {
		_ = st.Close()
	}
	return err
}

const fellBack = "may have fallen back to its previous transaction"

func TestStoreRefusesAnEmptyFileAndLeavesIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	err := openPathOnly(path)
	if !errors.Is(err, ErrUntrusted) {
		t.Fatalf("Open on an empty store file: %v", err)
	}
	for _, want := range []string{path, "empty", "move the file aside"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	after, _ := os.Stat(path)
	if after.Size() != 0 || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the refused file was changed: %d bytes, modified %v (was %v)", after.Size(), after.ModTime(), before.ModTime())
	}
}

// A store file group or others may read or write is refused, as the
// credentials are, and left as it is; 0600 is taken.
func TestStoreRefusesAFileOthersMayAccess(t *testing.T) {
	h := writeHistory(t)
	for _, mode := range []os.FileMode{0o644, 0o660, 0o602, 0o600} {
		path := filepath.Join(t.TempDir(), "state.db")
		if err := os.WriteFile(path, h.file, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		err := openPathOnly(path)
		if mode&0o077 == 0 {
			if err != nil {
				t.Fatalf("mode %04o: %v", mode, err)
			}
			continue
		}
		if !errors.Is(err, auth.ErrInsecureFile) || !strings.Contains(err.Error(), "chmod 600 "+path) {
			t.Fatalf("mode %04o: %v, want auth.ErrInsecureFile saying chmod 600", mode, err)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != mode {
			t.Fatalf("mode %04o changed to %04o", mode, fi.Mode().Perm())
		}
	}
}

func TestStoreRefusesATruncatedFileAndLeavesIt(t *testing.T) {
	h := writeHistory(t)
	pageSize, hwm := pageLayout(t, h.file)
	used := pageSize * hwm
	t.Logf("file %d bytes, %d pages of %d in use", len(h.file), hwm, pageSize)
	for _, n := range []int{1, 79, pageSize, 2*pageSize - 1, 2 * pageSize, used / 2, used - pageSize, used - 1} {
		path := filepath.Join(t.TempDir(), "state.db")
		if err := os.WriteFile(path, h.file[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		err := openPathOnly(path)
		if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), path) {
			t.Errorf("truncated to %d bytes: %v", n, err)
			continue
		}
		t.Logf("%d bytes: %v", n, err)
		if got, _ := os.ReadFile(path); !bytes.Equal(got, h.file[:n]) {
			t.Errorf("truncated to %d bytes: the refused file was changed", n)
		}
	}
	// The file may end where its pages do: bbolt's slack is not state.
	got, _, err := openStoreFile(t, h.file[:used])
	if err != nil || !reflect.DeepEqual(got, h.final()) {
		t.Fatalf("the pages in use alone: %v\n%v", err, got)
	}
}

// TestStoreWithFlippedBytesFailsOrLoadsWhatWasWritten flips 1 to 3 random
// bytes of a store — anywhere in the file, in the pages in use, or only
// among their non-zero bytes (headers, keys, records) — and opens it: the
// store must be refused, or load exactly the state written last, or —
// only with the fall-back warning — exactly the state before the last
// write. Never a panic, never other content.
func TestStoreWithFlippedBytesFailsOrLoadsWhatWasWritten(t *testing.T) {
	h := writeHistory(t)
	pageSize, hwm := pageLayout(t, h.file)
	var anywhere, inUse, nonZero []int
	for i, c := range h.file {
		anywhere = append(anywhere, i)
		if i < pageSize*hwm {
			inUse = append(inUse, i)
			if c != 0 {
				nonZero = append(nonZero, i)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		offsets []int
		seeds   uint64
	}{
		{"anywhere", anywhere, 200},
		{"pages in use", inUse, 400},
		{"non-zero bytes in use", nonZero, 800},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count := map[string]int{}
			for seed := range tc.seeds {
				rng := rand.New(rand.NewPCG(seed, 0x5eed))
				file := bytes.Clone(h.file)
				var flips []string
				for range 1 + rng.IntN(3) {
					at, x := tc.offsets[rng.IntN(len(tc.offsets))], byte(1+rng.IntN(255))
					file[at] ^= x
					flips = append(flips, fmt.Sprintf("%d^%#02x", at, x))
				}
				got, logged, err := openStoreFile(t, file)
				warned := strings.Contains(logged, fellBack)
				switch {
				case err != nil && errors.Is(err, ErrUntrusted):
					count["refused by "+refusedBy(err)]++
				case err != nil:
					t.Errorf("seed %d, flips %v: refused without ErrUntrusted: %v", seed, flips, err)
				case reflect.DeepEqual(got, h.final()) && warned:
					count["final state, with the fall-back warning"]++
				case reflect.DeepEqual(got, h.final()):
					count["final state"]++
				case reflect.DeepEqual(got, h.previous()) && warned:
					count["previous state, with the fall-back warning"]++
				default:
					t.Errorf("seed %d, flips %v: loaded other content (warned %v):\n%v\nlog: %s", seed, flips, warned, got, logged)
				}
			}
			t.Logf("%d seeds, flips among %d bytes:", tc.seeds, len(tc.offsets))
			for _, k := range slices.Sorted(maps.Keys(count)) {
				t.Logf("%5d %s", count[k], k)
			}
		})
	}
}

// refusedBy names the check that refused a store.
func refusedBy(err error) string {
	var pe *panicError
	switch msg := errors.Unwrap(err).Error(); {
	case errors.As(err, &pe):
		return "a panic in bbolt, recovered"
	case strings.Contains(msg, "checksum mismatch") && strings.Contains(msg, "namespace"):
		return "a record's checksum"
	case strings.Contains(msg, "meta page"):
		return "the meta pages"
	case strings.Contains(msg, "bbolt's consistency check"):
		return "bbolt's consistency check"
	case strings.Contains(msg, "top-level key") || strings.Contains(msg, "namespace"):
		return "the records' rules (buckets, keys, names, owners)"
	default:
		return "the file's pages (bounds, ids, counts)"
	}
}

func TestStoreFallBackToThePreviousTransactionIsLogged(t *testing.T) {
	h := writeHistory(t)
	pageSize, _ := pageLayout(t, h.file)
	newest := 0
	if txidOf(h.file[pageSize:]) > txidOf(h.file) {
		newest = 1
	}
	for _, tc := range []struct {
		page int
		want []state.Snapshot
	}{{newest, h.previous()}, {1 - newest, h.final()}} {
		file := bytes.Clone(h.file)
		file[tc.page*pageSize+pageHeaderSize+20] ^= 0xff // inside the meta's checksummed fields
		got, logged, err := openStoreFile(t, file)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("meta page %d damaged: %v\n%v", tc.page, err, got)
		}
		if !strings.Contains(logged, fellBack) || !strings.Contains(logged, "level=WARN") {
			t.Fatalf("meta page %d damaged: no warning: %q", tc.page, logged)
		}
	}
	if _, logged, _ := openStoreFile(t, h.file); logged != "" {
		t.Fatalf("an intact store logged: %q", logged)
	}
}

func TestStoreChecksumCatchesAChangedValue(t *testing.T) {
	h := writeHistory(t)
	// Every copy of the entry (the page in use and stale ones): the
	// changed JSON stays valid, so only the checksum can tell.
	file := bytes.ReplaceAll(h.file, []byte(`"dark"`), []byte(`"dork"`))
	if bytes.Equal(file, h.file) {
		t.Fatal("the value is not in the file")
	}
	_, _, err := openStoreFile(t, file)
	if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "checksum mismatch") || !strings.Contains(err.Error(), `"theme"`) {
		t.Fatalf("a changed value: %v", err)
	}
}

func TestStoreChecksumCatchesAChangedNamespaceRecord(t *testing.T) {
	h := writeHistory(t)
	file := bytes.ReplaceAll(h.file, []byte(`"owner":"phone"`), []byte(`"owner":"phonf"`))
	_, _, err := openStoreFile(t, file)
	if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "checksum mismatch") || !strings.Contains(err.Error(), `"phone.prefs"`) {
		t.Fatalf("a changed owner: %v", err)
	}
}

// A key changed in the b+tree itself (not in the record) no longer matches
// the key its entry was written for.
func TestStoreCatchesAKeyThatDoesNotMatchItsEntry(t *testing.T) {
	h := writeHistory(t)
	// In a leaf, a key is followed by its value, whose first byte is the
	// record format.
	stored := append([]byte("theme"), recordFormat)
	file := bytes.ReplaceAll(h.file, stored, append([]byte("thyme"), recordFormat))
	if bytes.Equal(file, h.file) {
		t.Fatal("the key is not in the file")
	}
	_, _, err := openStoreFile(t, file)
	if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), `"thyme"`) {
		t.Fatalf("a changed key: %v", err)
	}
}

// TestStoreWrittenBeforeChecksumsLoads: a store of plain JSON records (as
// busbar wrote before checksums) loads, is rewritten with checksums, and
// loads again the same.
func TestStoreWrittenBeforeChecksumsLoads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	entries := []state.Entry{
		{Key: "mode", Version: 3, Source: "thermostat", Deleted: true},
		{Key: "target", Value: json.RawMessage(`22`), Version: 5, Source: "phone", Open: true},
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucketIfNotExists(bucketMeta)
		all, _ := tx.CreateBucketIfNotExists(bucketEntries)
		old, _ := json.Marshal(struct {
			Owner string `json:"owner"`
			Seq   uint64 `json:"seq"`
		}{"thermostat", 7})
		if err := meta.Put([]byte("home"), old); err != nil {
			return err
		}
		b, err := all.CreateBucket([]byte("home"))
		if err != nil {
			return err
		}
		for _, e := range entries {
			raw, _ := wire.JSON(e)
			if err := b.Put([]byte(e.Key), raw); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || db.Close() != nil {
		t.Fatal(err)
	}
	want := []state.Snapshot{{NS: "home", Owner: "thermostat", Seq: 7, Entries: entries}}
	for _, round := range []string{"before checksums", "rewritten with checksums"} {
		got, logged, err := openPath(t, path)
		if err != nil {
			t.Fatalf("%s: %v", round, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: loaded %v", round, got)
		}
		t.Logf("%s: log %q", round, logged)
	}
	db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		check := func(what string, rec []byte) {
			if len(rec) == 0 || rec[0] != recordFormat {
				t.Errorf("%s was not rewritten: %q", what, rec)
			}
		}
		check("the namespace record", tx.Bucket(bucketMeta).Get([]byte("home")))
		for _, e := range entries {
			check(e.Key, tx.Bucket(bucketEntries).Bucket([]byte("home")).Get([]byte(e.Key)))
		}
		return nil
	})
}

// A legacy record is still held to the rules: a key that does not match
// its entry is refused.
func TestStoreRefusesALegacyEntryUnderAnotherKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucketIfNotExists(bucketMeta)
		all, _ := tx.CreateBucketIfNotExists(bucketEntries)
		_ = meta.Put([]byte("home"), []byte(`{"owner":"thermostat","seq":1}`))
		b, _ := all.CreateBucket([]byte("home"))
		return b.Put([]byte("targex"), []byte(`{"k":"target","v":1,"ver":1,"src":"thermostat"}`))
	})
	if err != nil || db.Close() != nil {
		t.Fatal(err)
	}
	err = openPathOnly(path)
	if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), `its entry is for key "target"`) {
		t.Fatalf("a legacy entry under another key: %v", err)
	}
}

// A leaf page whose element count is lowered passes bbolt's own check:
// the bucket simply yields fewer keys. The namespace's record counts its
// keys in the same transaction as every write, so the store that lost
// records is refused, saying so.
func TestStoreRefusesANamespaceThatLostKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	w := newWriter(t, path)
	const keys = 60
	for i := range keys {
		w.write("thermostat", state.Delta{NS: "home", Key: fmt.Sprintf("key-%02d", i), Version: uint64(i + 1), Value: json.RawMessage(fmt.Sprintf(`{"reading":%d,"pad":"%s"}`, i, strings.Repeat("x", 40)))})
	}
	if err := w.st.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := openStoreFile(t, file); err != nil {
		t.Fatalf("the store as written: %v", err)
	}
	// The leaf page holding most of the namespace's keys: flags (2 bytes
	// at 8) say leaf, count (2 bytes at 10) is the number of elements.
	pageSize, hwm := pageLayout(t, file)
	best, bestCount := -1, 0
	for p := 2; p < hwm; p++ {
		hdr := file[p*pageSize:]
		flags, count := binary.NativeEndian.Uint16(hdr[8:]), int(binary.NativeEndian.Uint16(hdr[10:]))
		if flags == 0x02 && count > bestCount && bytes.Contains(hdr[:pageSize], []byte("key-")) {
			best, bestCount = p, count
		}
	}
	if best < 0 || bestCount < 4 {
		t.Fatalf("no leaf page of the namespace's keys (best %d with %d)", best, bestCount)
	}
	binary.NativeEndian.PutUint16(file[best*pageSize+10:], uint16(bestCount-3))
	_, _, err = openStoreFile(t, file)
	if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), fmt.Sprintf("says it holds %d keys, its bucket has %d", keys, keys-3)) {
		t.Fatalf("a namespace that lost 3 keys: %v", err)
	}
}

// The records keep the bytes busbar wrote before the store was its own
// package: the JSON of a namespace's record in this field order, and a
// tombstone's, behind the format byte and the CRC-32C of the JSON.
func TestStoreRecordsKeepTheirBytes(t *testing.T) {
	for _, tc := range []struct {
		v    any
		json string
	}{
		{stored(Record{NS: "home", Owner: "thermostat", Seq: 7, Meta: Meta{Epoch: 10, OwnerAt: 11, Inherited: true}}, 2),
			`{"ns":"home","owner":"thermostat","seq":7,"keys":2,"epoch":10,"owner_at":11,"inherited":true}`},
		{stored(Record{NS: "home", Owner: "thermostat", Seq: 7}, 0), `{"ns":"home","owner":"thermostat","seq":7,"keys":0}`},
		{Tomb{NS: "gone", Floor: 15}, `{"ns":"gone","floor":15}`},
		{state.Entry{Key: "k", Value: json.RawMessage(`"<&>"`), Version: 2, Source: "a", Open: true}, `{"k":"k","v":"<&>","ver":2,"src":"a","open":true}`},
	} {
		rec := encodeRecord(tc.v)
		want := binary.BigEndian.AppendUint32([]byte{recordFormat}, crc32.Checksum([]byte(tc.json), castagnoli))
		if want = append(want, tc.json...); !bytes.Equal(rec, want) {
			t.Errorf("%T: %q, want %q", tc.v, rec, want)
		}
	}
}
