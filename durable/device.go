package durable

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"busbar/seal"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DBFile is the name of the device's database in its directory.
const DBFile = "device.db"

// Defaults of Options.
const (
	DefaultLockTimeout    = 5 * time.Second
	DefaultHandlerBackoff = 200 * time.Millisecond
	DefaultMaxHeld        = 100
	DefaultMaxEvents      = 1000
)

// The delivery contract's fixed figures (seed 001).
const (
	// SyncTTL: a Sync entry still undelivered this long after Send is
	// removed with sendFailed(expired).
	SyncTTL = 30 * 24 * time.Hour
	// ReplayWindow: a message whose sender timestamp is more than this
	// before the recipient's clock is dropped as unreadable(expired);
	// a dedup record is kept this long past the later of the handling
	// time and the sender timestamp.
	ReplayWindow = 60 * 24 * time.Hour
	// HandlerAttempts: how many times a failing handler is run before
	// the message is dropped with handlerGaveUp.
	HandlerAttempts = 5
	// MinBackoff and MaxBackoff bound the sender's retry delay.
	MinBackoff = time.Second
	MaxBackoff = 5 * time.Minute
)

// Options configure a Device. The zero value is the defaults.
type Options struct {
	// MaxPayloadBytes is the largest body Send takes: 0 or more than
	// seal.MaxPayloadBytes is seal.MaxPayloadBytes; a lower value is
	// honoured.
	MaxPayloadBytes int
	// LockTimeout bounds the wait for device.db's file lock when another
	// process holds it. 0 is DefaultLockTimeout.
	LockTimeout time.Duration
	// HandlerBackoff is the first delay between handler attempts; it
	// doubles after each. 0 is DefaultHandlerBackoff.
	HandlerBackoff time.Duration
	// MaxHeld is how many blobs of a newer end-to-end version stay
	// unacked. 0 is DefaultMaxHeld (100).
	MaxHeld int
	// MaxEvents bounds the buffered delivery events; past it the oldest
	// is dropped and counted. 0 is DefaultMaxEvents.
	MaxEvents int
	// MaxPendingManifests bounds the membership messages kept until
	// their signer is known, over all groups; one more is acked and
	// dropped as deliveryIssue(tooManyPending). 0 is
	// DefaultMaxPendingManifests (64).
	MaxPendingManifests int
	// Now is the clock; nil is time.Now. Tests pass a fake one.
	Now func() time.Time

	// failpoint, if set, is called at each crash point by name (the
	// Fail… constants); an error stops the operation there, as a crash
	// would. Set by the tests, and by FailpointFromEnv.
	failpoint func(name string) error
}

func (o Options) withDefaults() Options {
	if o.MaxPayloadBytes <= 0 || o.MaxPayloadBytes > seal.MaxPayloadBytes {
		o.MaxPayloadBytes = seal.MaxPayloadBytes
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.HandlerBackoff <= 0 {
		o.HandlerBackoff = DefaultHandlerBackoff
	}
	if o.MaxHeld <= 0 {
		o.MaxHeld = DefaultMaxHeld
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = DefaultMaxEvents
	}
	if o.MaxPendingManifests <= 0 {
		o.MaxPendingManifests = DefaultMaxPendingManifests
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// A Device is one device's directory, opened by one process. Several
// Devices, in one process or several, may use the same directory at once:
// none keeps device.db open between operations.
type Device struct {
	dir  string
	me   *seal.Identity
	opts Options

	mu      sync.Mutex
	closed  bool
	handler *registration   // guarded by mu
	regCh   chan struct{}   // closed and replaced when handler changes; guarded by mu
	done    chan struct{}   // closed by Close
	life    context.Context // cancelled by Close: ends Run's sessions
	kill    context.CancelFunc
	runs    sync.WaitGroup // Run calls in progress

	// Change signals (watch.go): txChanged is set by a transaction that
	// queued outbox entries or raised an event, and read by update once
	// it committed; changes wakes this process's Serve; ownSignal is the
	// token this process last wrote to SignalFile.
	txChanged atomic.Bool
	changes   changes
	ownSignal atomic.Pointer[string]
}

// Init makes a new device in dir: its identity (seal.Identity.Save, which
// never replaces one) and an empty device.db. dir is created with mode
// 0700 if missing.
func Init(dir string, opts Options) (*Device, error) {
	id, err := seal.Generate()
	if err != nil {
		return nil, err
	}
	if err := id.Save(dir); err != nil {
		return nil, err
	}
	return open(dir, id, opts)
}

// Open opens the device Init made in dir.
func Open(dir string, opts Options) (*Device, error) {
	id, err := seal.Load(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoDevice, dir)
	}
	if err != nil {
		return nil, err
	}
	return open(dir, id, opts)
}

func open(dir string, id *seal.Identity, opts Options) (*Device, error) {
	d := &Device{
		dir:   dir,
		me:    id,
		opts:  opts.withDefaults(),
		regCh: make(chan struct{}),
		done:  make(chan struct{}),
	}
	d.life, d.kill = context.WithCancel(context.Background())
	if err := os.MkdirAll(filepath.Join(dir, groupsDir), 0o700); err != nil {
		return nil, err
	}
	if err := d.update(func(tx *bolt.Tx) error { return createBuckets(tx) }); err != nil {
		return nil, err
	}
	return d, nil
}

// Identity returns the device's identity.
func (d *Device) Identity() *seal.Identity { return d.me }

// ID returns the device's id.
func (d *Device) ID() seal.DeviceID { return d.me.ID() }

// Dir returns the device's directory.
func (d *Device) Dir() string { return d.dir }

// Close makes Send fail with ErrClosed, ends Run, and waits for Run to
// return. It is idempotent. Nothing is held open, so nothing is flushed.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	d.kill()
	d.mu.Unlock()
	d.runs.Wait()
	return nil
}

func (d *Device) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

func (d *Device) now() time.Time { return d.opts.Now() }

func (d *Device) fail(name string) error {
	if d.opts.failpoint == nil {
		return nil
	}
	return d.opts.failpoint(name)
}

// openDB opens device.db for one operation: bbolt takes an exclusive
// flock on the file, waiting at most LockTimeout for another process (or
// another Device of this one) to finish its transaction.
func (d *Device) openDB() (*bolt.DB, error) {
	db, err := bolt.Open(filepath.Join(d.dir, DBFile), 0o600, &bolt.Options{Timeout: d.opts.LockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%w (waited %v): %s", ErrLocked, d.opts.LockTimeout, filepath.Join(d.dir, DBFile))
	}
	return db, err
}

// update runs fn in one read-write transaction of device.db, opened and
// closed around it. The commit is fsync'd before update returns.
func (d *Device) update(fn func(tx *bolt.Tx) error) error {
	db, err := d.openDB()
	if err != nil {
		return err
	}
	d.txChanged.Store(false) // the file lock is held: no other transaction of d runs
	err = db.Update(fn)
	if err == nil && d.txChanged.Load() {
		d.signal() // before the lock goes, so signals keep the commits' order
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// view runs fn in one read-only transaction. It takes the same exclusive
// lock as update: bbolt's shared lock is for read-only opens, and a
// writable open must not meet a reader that remaps under it.
func (d *Device) view(fn func(tx *bolt.Tx) error) error {
	db, err := d.openDB()
	if err != nil {
		return err
	}
	err = db.View(fn)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}
