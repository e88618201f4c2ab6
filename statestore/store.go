package statestore

// The store (docs/state.md#the-store): one bbolt file that holds every
// namespace, opened only when it can be trusted.
//
// Layout: top-level buckets,
//
//	namespaces  name → record(storedMeta{ns, owner, seq, keys, epoch, owner_at, inherited})
//	entries     name → a nested bucket: key → record(state.Entry)
//	dropped     name → record(Tomb{ns, floor}), on a bus only
//
// and a namespace is in both of the first two or in neither (Put writes
// both in one transaction). The third, absent in a store that never was on
// a bus, holds the tombstones of dropped namespaces (tomb.go). A record is
//
//	[1 byte: recordFormat][4 bytes: CRC-32C (Castagnoli) of the JSON, big-endian][the JSON]
//
// Records written before the checksum existed are the bare JSON of the
// same structs (storedMeta without ns). JSON of a struct always starts
// with '{' (0x7b) and the format byte never is '{', so the first byte
// tells them apart; such a legacy record is trusted as it is (it has
// nothing to verify but its own rules) and rewritten with its checksum at
// open.
//
// Opening, in order: the file's bbolt structure is checked without bbolt
// (file.go: meta pages, page bounds; a file of size 0 or shorter than
// two meta pages is refused, never initialised); bbolt opens it; one read
// transaction runs bbolt's own consistency check (Tx.Check) and loads and
// verifies every record. All of it runs with a recover and
// debug.SetPanicOnFault, so a panic in bbolt or a fault reading its memory
// map becomes an error. Any failure refuses the store (ErrUntrusted).
// Nothing is written unless every check passed.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"busbar/auth"
	"busbar/state"
	"busbar/wire"
)

// ErrUntrusted is matched (errors.Is) by the error of Open when the store
// exists but cannot be trusted: empty, truncated, damaged, or holding what
// busbar never wrote. The broker does not start on it (it is
// broker.ErrStoreUntrusted); docs/state.md#the-store says what to do.
//
// This package's errors keep the "broker:" prefix they had when the store
// lived in package broker: the broker is what refuses to start, and the
// text an operator reads did not change with the move.
var ErrUntrusted = errors.New("broker: the state store cannot be trusted")

// untrustedError says which store, what is wrong with it, and the way out.
type untrustedError struct {
	path string
	err  error
}

func (e *untrustedError) Error() string {
	return fmt.Sprintf("broker: state store %s cannot be trusted: %v. "+
		"The broker does not start on it. To start anyway, move the file aside and restart: "+
		"state then starts empty and every owner rebuilds its namespaces by writing again "+
		"(see docs/state.md#the-store)", e.path, e.err)
}

func (e *untrustedError) Unwrap() error        { return e.err }
func (e *untrustedError) Is(target error) bool { return target == ErrUntrusted }

var (
	bucketMeta    = []byte("namespaces") // name → record(storedMeta)
	bucketEntries = []byte("entries")    // one nested bucket per namespace: key → record(state.Entry)
	bucketDropped = []byte("dropped")    // name → record(Tomb), on a bus
)

// Meta is what a bus of brokers agrees on about a namespace beyond its
// entries and owner (docs/cluster.md#dropping-a-namespace-and-giving-it-a-new-owner),
// stored in the namespace's record.
type Meta struct {
	Epoch   uint64 `json:"epoch,omitempty"`    // when it was created, Unix nanoseconds (0: before epochs)
	OwnerAt uint64 `json:"owner_at,omitempty"` // when its owner was set (creation or a new owner)
	// Inherited: it had another owner before, so a key not open may hold
	// a former owner's write (the check at Open allows it).
	Inherited bool `json:"inherited,omitempty"`
}

// Record is a namespace's record as Put and SetMeta take it: its name,
// owner, the sequence number of its last write, and its Meta.
type Record struct {
	NS    string
	Owner string
	Seq   uint64
	Meta
}

// storedMeta is a namespace's record in bucketMeta: a Record with its key
// count, in this field order (the JSON on disk). NS repeats the bucket
// key, so a key damaged in place does not pass as another namespace
// (legacy records lack it).
type storedMeta struct {
	NS    string `json:"ns,omitempty"`
	Owner string `json:"owner"`
	Seq   uint64 `json:"seq"`
	// Keys is how many keys the namespace's bucket holds, written in the
	// same transaction as every entry: a bucket that lost records (a
	// damaged page that bbolt's own check passes) no longer matches it,
	// and the store is refused. nil in a record from before counts.
	Keys *uint64 `json:"keys,omitempty"`
	Meta
}

// stored is r's record holding keys keys.
func stored(r Record, keys uint64) storedMeta {
	return storedMeta{NS: r.NS, Owner: r.Owner, Seq: r.Seq, Keys: &keys, Meta: r.Meta}
}

const recordFormat = 1 // the first byte of a checksummed record

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeRecord is v's record: format byte, CRC-32C of the JSON, the JSON.
func encodeRecord(v any) []byte {
	js, err := wire.JSON(v)
	if err != nil {
		panic(err) // storedMeta and state.Entry always encode
	}
	rec := make([]byte, 5, 5+len(js))
	rec[0] = recordFormat
	binary.BigEndian.PutUint32(rec[1:5], crc32.Checksum(js, castagnoli))
	return append(rec, js...)
}

// decodeRecord verifies a record and decodes its JSON into v, strictly (no
// unknown field, nothing after the value). legacy reports a record from
// before checksums.
func decodeRecord(rec []byte, v any) (legacy bool, err error) {
	var js []byte
	switch {
	case len(rec) == 0:
		return false, errors.New("empty record")
	case rec[0] == '{':
		js, legacy = rec, true
	case rec[0] != recordFormat:
		return false, fmt.Errorf("unknown record format %#02x", rec[0])
	case len(rec) < 5:
		return false, errors.New("record shorter than its header")
	default:
		js = rec[5:]
		if crc32.Checksum(js, castagnoli) != binary.BigEndian.Uint32(rec[1:5]) {
			return false, errors.New("checksum mismatch")
		}
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return legacy, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return legacy, errors.New("data after the JSON value")
	}
	return legacy, nil
}

// Store is the open bbolt file. It is not safe for concurrent use: its
// caller serialises the calls (the broker's state service makes them under
// its lock), as the key counts it keeps are read and written by each.
type Store struct {
	db   *bolt.DB
	keys map[string]uint64 // keys per namespace on disk, for storedMeta.Keys
}

// Loaded is what Open read: every namespace with its Meta, and the
// tombstones.
type Loaded struct {
	Spaces []state.Snapshot  // sorted by name
	Metas  map[string]Meta   // by namespace
	Tombs  map[string]uint64 // tombstones' floors, by namespace
	legacy []legacyRecord    // records still in a legacy format, rewritten at open
	fresh  bool              // no buckets yet: a new file
}

type legacyRecord struct {
	ns, key string // key "": the namespace's meta
	rec     []byte // the record with its checksum
}

// checkStoreMode refuses a state store that group or others may read or
// write, as the credentials are refused (auth.ErrInsecureFile): it holds
// every namespace, and a file others can write would let them forge
// state. It is refused, not changed. Windows has ACLs, not mode bits.
func checkStoreMode(path string) error {
	fi, err := os.Stat(path)
	if err != nil || runtime.GOOS == "windows" {
		return nil // a missing file is a new store; other errors show up when it is opened
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("broker: state store: %w: %s has mode %04o, want 0600 (chmod 600 %s)", auth.ErrInsecureFile, path, perm, path)
	}
	return nil
}

// Open opens and verifies the store at path (a missing file is a new,
// empty store) and returns what it holds. A store that cannot be trusted
// is refused with an error matching ErrUntrusted; a store group or others
// may access, with auth.ErrInsecureFile. log hears of a fall-back to the
// previous transaction and of records rewritten with their checksum.
func Open(path string, log *slog.Logger) (st *Store, l Loaded, err error) {
	if err := checkStoreMode(path); err != nil {
		return nil, l, err
	}
	var info fileInfo
	if err := guarded(func() (err error) { info, err = inspectFile(path); return err }); err != nil {
		return nil, l, &untrustedError{path, err}
	}
	var db *bolt.DB
	if err := guarded(func() (err error) {
		db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
		return err
	}); err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, l, fmt.Errorf("broker: state store %s is locked by another process (another broker on the same data directory?)", path)
		}
		var pe *panicError
		if errors.As(err, &pe) || errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) || errors.Is(err, berrors.ErrVersionMismatch) {
			return nil, l, &untrustedError{path, err}
		}
		return nil, l, fmt.Errorf("broker: state store %s: %w", path, err) // not the file's fault: permissions, I/O
	}
	defer func() {
		if err != nil {
			_ = guarded(db.Close)
		}
	}()
	if err := guarded(func() error { return db.View(func(tx *bolt.Tx) (err error) { l, err = load(tx); return err }) }); err != nil {
		return nil, l, &untrustedError{path, err}
	}
	if l.fresh || len(l.legacy) > 0 {
		if err := guarded(func() error { return db.Update(func(tx *bolt.Tx) error { return upgrade(tx, l.legacy) }) }); err != nil {
			return nil, l, fmt.Errorf("broker: state store %s: %w", path, err)
		}
		if len(l.legacy) > 0 {
			log.Info("state store: records from before checksums or key counts rewritten with them", "file", path, "records", len(l.legacy))
		}
	}
	if info.damagedMeta >= 0 {
		// Which of the two was the newer cannot be told for sure: the
		// damage may be in the txid itself. So the warning says "may".
		log.Warn("state store may have fallen back to its previous transaction: one of its two meta pages is damaged and bbolt opened the other. "+
			"After a crash, that is a write torn while it was committed, which was never acknowledged; otherwise the file is damaged, and the last write before the stop may be lost",
			"file", path, "damaged_meta_page", info.damagedMeta, "opened_txid", info.txid)
	}
	st = &Store{db: db, keys: map[string]uint64{}}
	for _, snap := range l.Spaces {
		st.keys[snap.NS] = uint64(len(snap.Entries))
	}
	return st, l, nil
}

// guarded runs f in this goroutine with a recover and SetPanicOnFault
// (restored after), so a panic in bbolt over a damaged page, or a fault
// reading its memory map (a damaged page id, a page past the end of the
// file), is an error instead of the end of the process.
func guarded(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{r}
		}
	}()
	return f()
}

// panicError is a panic that guarded recovered.
type panicError struct{ v any }

func (e *panicError) Error() string { return fmt.Sprintf("reading it failed: %v", e.v) }

// load runs bbolt's consistency check, then reads and verifies every
// namespace.
func load(tx *bolt.Tx) (Loaded, error) {
	l := Loaded{Metas: map[string]Meta{}, Tombs: map[string]uint64{}}
	var first error
	problems := 0
	for err := range tx.Check() { // drained to the end: Check's goroutine sends until done
		if problems++; first == nil {
			first = err
		}
	}
	if problems > 0 {
		more := ""
		if problems > 1 {
			more = fmt.Sprintf(" (and %d more)", problems-1)
		}
		return l, fmt.Errorf("bbolt's consistency check failed: %v%s", first, more)
	}
	meta, entries, err := topBuckets(tx)
	if err != nil {
		return l, err
	}
	if err := loadTombs(tx.Bucket(bucketDropped), l.Tombs); err != nil {
		return l, err
	}
	if meta == nil {
		l.fresh = true
		return l, nil
	}
	inMeta := map[string]bool{}
	c := meta.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		ns := string(k)
		if v == nil {
			return l, fmt.Errorf("namespace %q: a bucket where its record belongs", ns)
		}
		snap, err := loadNamespace(ns, v, entries.Bucket(k), &l)
		if err != nil {
			return l, fmt.Errorf("namespace %q: %w", ns, err)
		}
		inMeta[ns] = true
		l.Spaces = append(l.Spaces, snap)
	}
	c = entries.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil || !inMeta[string(k)] {
			return l, fmt.Errorf("entries of namespace %q without its record", k)
		}
	}
	return l, nil
}

// topBuckets returns the two buckets, both nil in a new file. Anything else
// at the top (one without the other, another key) is damage.
func topBuckets(tx *bolt.Tx) (meta, entries *bolt.Bucket, err error) {
	c := tx.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil || !bytes.Equal(k, bucketMeta) && !bytes.Equal(k, bucketEntries) && !bytes.Equal(k, bucketDropped) {
			return nil, nil, fmt.Errorf("unexpected top-level key %q", k)
		}
	}
	meta, entries = tx.Bucket(bucketMeta), tx.Bucket(bucketEntries)
	if (meta == nil) != (entries == nil) {
		return nil, nil, errors.New("one of its two buckets is missing")
	}
	return meta, entries, nil
}

// loadNamespace verifies a namespace's record and entries: checksums, the
// namespace and key rules, each entry's key against its bucket key, the
// rules every stored write obeyed (a key not open was written by the
// owner; a namespace has no more keys than writes, nor than MaxKeys).
func loadNamespace(ns string, rec []byte, b *bolt.Bucket, l *Loaded) (state.Snapshot, error) {
	snap := state.Snapshot{NS: ns}
	if err := state.CheckName(ns); err != nil {
		return snap, err
	}
	var m storedMeta
	legacy, err := decodeRecord(rec, &m)
	switch {
	case err != nil:
		return snap, fmt.Errorf("its record: %w", err)
	case m.NS != ns && (!legacy || m.NS != ""):
		return snap, fmt.Errorf("its record names namespace %q", m.NS)
	case auth.ValidNodeName(m.Owner) != nil:
		return snap, fmt.Errorf("owner %q is not a node name", m.Owner)
	case b == nil:
		return snap, errors.New("its entries are missing")
	}
	snap.Owner, snap.Seq = m.Owner, m.Seq
	l.Metas[ns] = m.Meta
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			return snap, fmt.Errorf("key %q: a bucket where its entry belongs", k)
		}
		e, legacy, err := loadEntry(ns, m, string(k), v)
		if err != nil {
			return snap, fmt.Errorf("key %q: %w", k, err)
		}
		if legacy {
			l.legacy = append(l.legacy, legacyRecord{ns: ns, key: e.Key, rec: encodeRecord(e)})
		}
		snap.Entries = append(snap.Entries, e)
	}
	n := uint64(len(snap.Entries))
	switch {
	case n > state.MaxKeys || n > m.Seq:
		return snap, fmt.Errorf("%d keys after %d writes (at most %d keys)", n, m.Seq, state.MaxKeys)
	case m.Keys != nil && *m.Keys != n:
		return snap, fmt.Errorf("its record says it holds %d keys, its bucket has %d: records were lost or added", *m.Keys, n)
	case legacy:
		l.legacy = append(l.legacy, legacyRecord{ns: ns, rec: encodeRecord(storedMeta{NS: ns, Owner: m.Owner, Seq: m.Seq, Keys: &n})})
	case m.Keys == nil: // from before key counts: counted now, checked from now on
		m.Keys = &n
		l.legacy = append(l.legacy, legacyRecord{ns: ns, rec: encodeRecord(m)})
	}
	return snap, nil
}

func loadEntry(ns string, m storedMeta, key string, rec []byte) (e state.Entry, legacy bool, err error) {
	if legacy, err = decodeRecord(rec, &e); err != nil {
		return e, legacy, err
	}
	d := state.Delta{NS: ns, Key: e.Key, Value: e.Value, Version: e.Version, Deleted: e.Deleted}
	switch {
	case e.Key != key:
		return e, legacy, fmt.Errorf("its entry is for key %q", e.Key)
	case d.Check() != nil:
		return e, legacy, d.Check()
	case auth.ValidNodeName(e.Source) != nil:
		return e, legacy, fmt.Errorf("source %q is not a node name", e.Source)
	case !e.Open && e.Source != m.Owner && !m.Inherited:
		return e, legacy, fmt.Errorf("written by %s, but the key is not open and %s owns the namespace (and always did)", e.Source, m.Owner)
	}
	return e, legacy, nil
}

// upgrade creates the buckets of a new store and rewrites legacy records
// with their checksum (run only after load verified everything).
func upgrade(tx *bolt.Tx, legacy []legacyRecord) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	entries, err := tx.CreateBucketIfNotExists(bucketEntries)
	if err != nil {
		return err
	}
	for _, r := range legacy {
		if r.key == "" {
			err = meta.Put([]byte(r.ns), r.rec)
		} else {
			err = entries.Bucket([]byte(r.ns)).Put([]byte(r.key), r.rec)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Put writes e and its namespace's record r, durably, in one
// transaction.
func (st *Store) Put(r Record, e state.Entry) error {
	ns := r.NS
	rec := encodeRecord(e)
	keys := st.keys[ns]
	err := st.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketEntries).CreateBucketIfNotExists([]byte(ns))
		if err != nil {
			return err
		}
		keys = st.keys[ns]
		if b.Get([]byte(e.Key)) == nil {
			keys++
		}
		if err := tx.Bucket(bucketMeta).Put([]byte(ns), encodeRecord(stored(r, keys))); err != nil {
			return err
		}
		return b.Put([]byte(e.Key), rec)
	})
	if err == nil {
		st.keys[ns] = keys
	}
	return err
}

// Drop deletes namespace ns and its entries, durably, and with tomb
// (on a bus) records its tombstone in the same transaction.
func (st *Store) Drop(ns string, tomb *Tomb) error {
	err := st.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMeta).Delete([]byte(ns)); err != nil {
			return err
		}
		if tomb != nil {
			if err := putTomb(tx, *tomb); err != nil {
				return err
			}
		}
		entries := tx.Bucket(bucketEntries)
		if entries.Bucket([]byte(ns)) == nil {
			return nil
		}
		return entries.DeleteBucket([]byte(ns))
	})
	if err == nil {
		delete(st.keys, ns)
	}
	return err
}

// SetMeta rewrites a namespace's record (a new owner, a new epoch),
// durably.
func (st *Store) SetMeta(r Record) error {
	meta := encodeRecord(stored(r, st.keys[r.NS]))
	return st.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put([]byte(r.NS), meta) })
}

// Close closes the file.
func (st *Store) Close() error { return st.db.Close() }
