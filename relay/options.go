package relay

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// The limits. Each is documented in docs/relay-store.md#limits and tested
// at and past its edge.
const (
	// MaxBlobBytes is the largest blob the relay takes: a sealed trueseal
	// message of the Protocol Size Limit (61,440 payload bytes) plus 4,096
	// bytes for the sealing's envelope, signature and padding. A ceiling:
	// Options.MaxBlobBytes may only lower it.
	MaxBlobBytes = 64 << 10

	// MaxDeviceBytes is the longest device id (see ValidDevice).
	MaxDeviceBytes = 64

	// DefaultMaxInboxBlobs is how many blobs one device's inbox holds
	// before pushes to it are refused InboxFull.
	DefaultMaxInboxBlobs = 10_000

	// DefaultMaxInboxBytes is how many blob bytes one device's inbox holds
	// before pushes to it are refused InboxFull (1,024 blobs of the maximum
	// size).
	DefaultMaxInboxBytes = 64 << 20

	// DefaultMaxStoreBytes bounds the blob bytes of busbar's own inboxes
	// all together, pushes in flight included; DefaultMaxInboxes bounds
	// those holding a blob (or a push in flight). Past either, a push is
	// refused InboxFull (temporary): made-up device ids cannot fill the
	// disk the broker's other stores share. The edge protocols' inboxes
	// have a budget of their own (the DefaultEdge constants), so nothing
	// pushed to them counts here.
	DefaultMaxStoreBytes = 1 << 30
	DefaultMaxInboxes    = 10_000

	// The budget of the edge protocols' inboxes (EdgeDevice: trueseal's),
	// kept apart from busbar's own so that no amount of pushes to them,
	// which an edge protocol may take from anonymous senders, refuses a
	// push to a busbar device's inbox: their blob bytes all together and
	// their inboxes holding a blob (pushes in flight included), and one
	// inbox's blobs and bytes. Past any of them a push to an edge inbox is
	// refused InboxFull (temporary). One inbox holds at most 256 blobs of
	// the largest size; 4,096 smaller ones.
	DefaultEdgeMaxStoreBytes = 512 << 20
	DefaultEdgeMaxInboxes    = 10_000
	DefaultEdgeMaxInboxBlobs = 4_096
	DefaultEdgeMaxInboxBytes = 16 << 20

	// DefaultMaxPushRate and DefaultPushBurst are the token bucket of one
	// device's inbox: pushes a second, sustained, and how many may come at
	// once. A push over it is refused RateLimited.
	DefaultMaxPushRate = 100
	DefaultPushBurst   = 1_000

	// DefaultTTL is how long a blob waits for its device; MaxTTL is the
	// most Options.TTL may say (the trueseal contract: 30 days by default
	// and at most 30 days). A longer TTL refuses to open.
	DefaultTTL = 30 * 24 * time.Hour
	MaxTTL     = DefaultTTL

	// DefaultSegmentBytes is the size at which the log moves on to a new
	// segment file; space is given back a whole segment at a time.
	DefaultSegmentBytes = 64 << 20

	// DefaultCacheBytes is how many bytes of blobs the store keeps in
	// memory from their push to their first delivery, so a recipient
	// online gets them without a read of the log. Past it, blobs are read
	// from disk when delivered.
	DefaultCacheBytes = 16 << 20

	// DefaultSweepInterval is how often expired blobs are deleted and idle
	// inboxes forgotten.
	DefaultSweepInterval = time.Minute

	// DefaultRetryInterval is how often a store whose write or fsync
	// failed (a full disk, say) tries to get back to a known state and
	// write again.
	DefaultRetryInterval = time.Second

	// compactChunk is how many bytes of the oldest segment one group
	// commit copies forward while the store reclaims space.
	compactChunk = 1 << 20
)

// Options configure a Store. The zero value is the defaults.
type Options struct {
	// TTL: a blob not acked this long after its push is deleted and never
	// delivered; nobody is told. 0 is DefaultTTL; more than MaxTTL, or
	// less than 0, refuses to open.
	TTL time.Duration

	// MaxBlobBytes: 0 is MaxBlobBytes; more than MaxBlobBytes refuses to
	// open.
	MaxBlobBytes int

	// MaxInboxBlobs and MaxInboxBytes bound one device's inbox, counting
	// pushes admitted but not yet on disk. 0 is the default.
	MaxInboxBlobs int
	MaxInboxBytes int64

	// MaxStoreBytes and MaxInboxes bound busbar's own inboxes all
	// together (every inbox but the edge protocols'): their blob bytes
	// and those holding a blob, pushes in flight included. 0 is the
	// default.
	MaxStoreBytes int64
	MaxInboxes    int

	// Edge is the budget of the edge protocols' inboxes (EdgeDevice),
	// counted apart from the limits above, which bind only busbar's own
	// inboxes. A zero field is its DefaultEdge constant.
	Edge Budget

	// MaxPushRate is the pushes a second into one device's inbox, and
	// PushBurst how many may come at once. 0 is the default; a negative
	// MaxPushRate turns rate limiting off.
	MaxPushRate float64
	PushBurst   int

	// CacheBytes bounds the blobs kept in memory until their first
	// delivery. 0 is DefaultCacheBytes; a negative value keeps none.
	CacheBytes int64

	// SegmentBytes: 0 is DefaultSegmentBytes. Tests use small ones.
	SegmentBytes int64

	// SweepInterval: 0 is DefaultSweepInterval.
	SweepInterval time.Duration

	// RetryInterval: after a failed write or fsync, how often the writer
	// tries to write again. 0 is DefaultRetryInterval.
	RetryInterval time.Duration

	// Now is the clock for push times, expiry and rate limits; nil is
	// time.Now. Tests pass a fake one.
	Now func() time.Time

	// Logger hears of failures (a failed write or fsync, a blob whose
	// record fails its check when read, a torn tail cut at open). nil is
	// slog.Default().
	Logger *slog.Logger

	hooks *hooks // tests only
}

// hooks let in-package tests watch and steer the writer.
type hooks struct {
	// sync replaces the fsync of a group commit; pushes are the sequence
	// numbers the commit holds. It must sync f itself (syncData) to keep
	// the store honest.
	sync func(f *os.File, pushes []Seq) error
	// beforeWrite runs in the writer before each group commit's write.
	beforeWrite func()
}

// Budget bounds one class of the store's inboxes: busbar's own
// (Options.MaxInboxBlobs and the rest) or the edge protocols'
// (Options.Edge). Each class's figures count only its own inboxes, pushes
// admitted and not yet on disk included; past any of them a push to an
// inbox of the class is refused InboxFull (temporary).
type Budget struct {
	// MaxStoreBytes bounds the blob bytes of the class's inboxes all
	// together; MaxInboxes, those of its inboxes holding a blob (or a
	// push in flight). A device already holding one is not refused for
	// MaxInboxes.
	MaxStoreBytes int64
	MaxInboxes    int
	// MaxInboxBlobs and MaxInboxBytes bound one inbox of the class.
	MaxInboxBlobs int
	MaxInboxBytes int64
}

// own is the budget of busbar's own inboxes, from o's fields.
func (o Options) own() Budget {
	return Budget{MaxStoreBytes: o.MaxStoreBytes, MaxInboxes: o.MaxInboxes, MaxInboxBlobs: o.MaxInboxBlobs, MaxInboxBytes: o.MaxInboxBytes}
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.TTL < 0:
		return o, fmt.Errorf("relay: TTL %v is negative", o.TTL)
	case o.TTL > MaxTTL:
		return o, fmt.Errorf("relay: TTL %v is longer than the most a blob may wait, %v (MaxTTL)", o.TTL, MaxTTL)
	case o.MaxBlobBytes < 0 || o.MaxBlobBytes > MaxBlobBytes:
		return o, fmt.Errorf("relay: MaxBlobBytes %d is outside 1..%d", o.MaxBlobBytes, MaxBlobBytes)
	case o.MaxInboxBlobs < 0, o.MaxInboxBytes < 0, o.MaxStoreBytes < 0, o.MaxInboxes < 0, o.PushBurst < 0, o.SegmentBytes < 0, o.SweepInterval < 0, o.RetryInterval < 0,
		o.Edge.MaxInboxBlobs < 0, o.Edge.MaxInboxBytes < 0, o.Edge.MaxStoreBytes < 0, o.Edge.MaxInboxes < 0:
		return o, fmt.Errorf("relay: negative limit in %+v", o)
	}
	o.TTL = cmp.Or(o.TTL, DefaultTTL)
	o.MaxBlobBytes = cmp.Or(o.MaxBlobBytes, MaxBlobBytes)
	o.MaxInboxBlobs = cmp.Or(o.MaxInboxBlobs, DefaultMaxInboxBlobs)
	o.MaxInboxBytes = cmp.Or(o.MaxInboxBytes, DefaultMaxInboxBytes)
	o.MaxStoreBytes = cmp.Or(o.MaxStoreBytes, DefaultMaxStoreBytes)
	o.MaxInboxes = cmp.Or(o.MaxInboxes, DefaultMaxInboxes)
	o.Edge.MaxInboxBlobs = cmp.Or(o.Edge.MaxInboxBlobs, DefaultEdgeMaxInboxBlobs)
	o.Edge.MaxInboxBytes = cmp.Or(o.Edge.MaxInboxBytes, DefaultEdgeMaxInboxBytes)
	o.Edge.MaxStoreBytes = cmp.Or(o.Edge.MaxStoreBytes, DefaultEdgeMaxStoreBytes)
	o.Edge.MaxInboxes = cmp.Or(o.Edge.MaxInboxes, DefaultEdgeMaxInboxes)
	o.MaxPushRate = cmp.Or(o.MaxPushRate, DefaultMaxPushRate)
	o.PushBurst = cmp.Or(o.PushBurst, DefaultPushBurst)
	o.SegmentBytes = cmp.Or(o.SegmentBytes, DefaultSegmentBytes)
	o.CacheBytes = cmp.Or(o.CacheBytes, DefaultCacheBytes)
	o.SweepInterval = cmp.Or(o.SweepInterval, DefaultSweepInterval)
	o.RetryInterval = cmp.Or(o.RetryInterval, DefaultRetryInterval)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}
