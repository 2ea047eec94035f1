package spool

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/internal/durable"
)

// ID identifies a spooled message. IDs start at 1 and increase
// monotonically, across restarts too; 0 means "before every message".
type ID uint64

// Message is one message bound upstream.
type Message struct {
	Topic   string
	Payload []byte
	QoS     byte // 0, 1 or 2
	Retain  bool
	// Expiry is when the message is no longer worth delivering (MQTT 5
	// message expiry, a rule's max_age); zero means never. Next and Peek
	// drop an expired message (DropExpired) instead of returning it.
	Expiry time.Time
	// Lane is the message's priority class (lanes.go).
	Lane Lane
}

// Entry is a spooled message with its ID.
type Entry struct {
	ID      ID
	Message Message
}

// SyncMode says when appended records are fsynced (the kit's, shared
// with the state store).
type SyncMode = durable.SyncMode

const (
	// SyncBatch fsyncs once per SyncInterval for all records written in it
	// (group commit); Append waits for that fsync. The zero value.
	SyncBatch = durable.SyncBatch
	// SyncAlways fsyncs before Append returns; concurrent appends share
	// an fsync.
	SyncAlways = durable.SyncAlways
	// SyncNone never fsyncs except on Close; records survive a process
	// crash but not a power loss.
	SyncNone = durable.SyncNone
)

// ParseSyncMode parses "always", "batch" or "none".
func ParseSyncMode(s string) (SyncMode, error) { return durable.ParseSyncMode("spool", s) }

// DropReason says why a message left the spool without an upstream ack.
type DropReason string

const (
	// DropSpoolFull: the oldest messages made room for a new one
	// (MaxBytes, or too many bytes pinned in sealed segments).
	DropSpoolFull DropReason = "spool_full"
	// DropCorrupt: the record could not be read back (I/O error or CRC
	// mismatch after it was written).
	DropCorrupt DropReason = "corrupt"
)

// String returns the reason as used in logs and metric labels.
func (r DropReason) String() string { return string(r) }

// Defaults for Options fields left zero.
const (
	DefaultMaxBytes     = 256 << 20
	DefaultSegmentSize  = 4 << 20
	DefaultSyncInterval = 20 * time.Millisecond
)

// ackCompactMin is the acks.log size above which it is replaced by a
// checkpoint (also at least 4x the size of the last checkpoint).
const ackCompactMin = 256 << 10

// ckptRetry is how long the flusher waits after a failed acks checkpoint
// (a full disk) before it tries again.
const ckptRetry = 5 * time.Second

// dropLogEvery rate-limits the "spool full" warning.
const dropLogEvery = 10 * time.Second

// Options configures a Spool.
type Options struct {
	Dir          string           // created if missing (0700)
	MaxBytes     int64            // bound on topic+payload bytes of unacked messages; default DefaultMaxBytes
	Sync         SyncMode         // default SyncBatch
	SyncInterval time.Duration    // group commit window; default DefaultSyncInterval
	SegmentSize  int64            // segment file size before rolling; default DefaultSegmentSize, at most 1 GiB
	Logger       *slog.Logger     // default: discard
	Now          func() time.Time // the clock expiries are checked against; default time.Now
	// FS is the seam every file operation goes through; nil: the real
	// file system. A crash-state test records a workload through it.
	FS durable.FS

	// Tests only (covered.go): how long a commit waits for the upstream's
	// acks, and how old the last full commit may be. Zero: the defaults.
	coverGrace  time.Duration
	coverMaxAge time.Duration
	// Tests only (crashsim_test.go): the acks.log size above which it is
	// checkpointed. Zero: ackCompactMin.
	ackCompactMin int64
	// Tests only (power_test.go): called after each fsync of a file with
	// its path and its size before the fsync began (what it covers).
	synced func(path string, size int64)
}

// Stats is a snapshot of the spool's state and counters.
type Stats struct {
	Messages  int64 // unacked messages
	Bytes     int64 // topic+payload bytes of unacked messages (bounded by MaxBytes)
	DiskBytes int64 // size of all segment files
	Segments  int   // segment files
	Waiters   int   // channels registered with WakeOnChange, not yet woken or forgotten

	Appended  uint64                // messages appended since Open
	Acked     uint64                // messages acked since Open
	Dropped   map[DropReason]uint64 // messages dropped since Open, by reason
	Recovered int64                 // unacked messages found by Open
	Ledger    Ledger                // where every message ever accepted went (persisted; ledger.go)

	// Damage found by Open (see the package documentation, "Damage").
	CorruptTail   int64  // torn or corrupt segment tails cut off, emptied segments included
	Skipped       int64  // unacked records lost to damage inside a segment (also in Dropped[DropCorrupt])
	DamagedBytes  int64  // segment bytes that could not be read (cut tails, skipped records, quarantined files)
	Quarantined   int64  // unreadable files moved aside (*.quarantine)
	EmptySegments int64  // segment files found empty (a power cut) and removed
	AckDamage     int64  // unreadable acks.log entries (+1 for a damaged, emptied or missing file)
	IDGap         uint64 // IDs skipped so that none is handed out twice (unclean stop or lost records)

	// Since Open.
	NoSpace      uint64 // appends refused with ErrNoSpace
	BytesWritten uint64 // bytes written to the spool's files (flash wear)
	Syncs        uint64 // fsyncs issued (files and directory)
	// CoveredCommits are group commits whose records the upstream had
	// all acknowledged before the fsync, which they therefore skipped
	// (covered.go).
	CoveredCommits uint64
}

// Spool is a durable FIFO of messages; see the package documentation.
// Its methods are safe for concurrent use.
type Spool struct {
	opts      Options
	log       *slog.Logger
	fs        durable.FS
	lock      durable.File // holds the directory's flock
	pinnedMax int64

	// flusher is the group commit (the kit's): it calls flush once per
	// commit window.
	flusher durable.Flusher
	quit    chan struct{} // closed by Close (ends a covered commit's wait)

	// Owned by the flusher goroutine (by Open before it starts, by Close
	// after it stopped).
	ackFile     durable.File
	ackPathName string // acks.log's path (made once: the flusher fsyncs it at every commit with acks)
	ackSize     int64
	ackUnsynced bool // written without fsync (SyncNone)
	compactAt   int64
	ackBuf      []byte
	ckptDue     bool      // a checkpoint is owed (set by Open)
	ckptRetryAt time.Time // after a failed checkpoint, not before this
	ackWarnAt   time.Time // last "writing acks failed" warning
	// fullCommitAt is the end of the last commit that fsynced (covered.go).
	fullCommitAt time.Time
	// coverOwed: a covered commit left records or acks unsynced; the
	// flusher wakes for a full commit coverMaxAge after fullCommitAt.
	// Flusher only.
	coverOwed  bool
	graceTimer *time.Timer // waitCovered's

	syncs   atomic.Uint64
	written atomic.Uint64 // bytes written to files

	mu       sync.Mutex
	closed   bool
	failed   error      // sticky write/fsync failure
	segs     []*segment // ascending base; the last one is active unless sealed
	unsynced []*segment // written since their last fsync, for the flusher
	// unsyncedSpare is recycled by the flusher (a new slice per commit
	// was garbage at a sensor's rate, issue 16).
	unsyncedSpare []*segment
	nextID        ID
	live          int64
	liveBytes     int64
	diskBytes     int64
	pinned        int64         // dead bytes in sealed segments
	batch         *batch        // waiters for the next flush; nil if none
	batches       [2]batch      // batch is one of them, the flusher's batch (flushing) the other
	flushing      *batch        // the batch the flusher is completing; nil if none
	notify        chan struct{} // closed on append (SyncNone) or by the flush after one; nil if no one waits
	// wakeOnChange are sent to when notify is closed (WakeOnChange),
	// then forgotten.
	wakeOnChange []chan<- struct{}
	// unnotified: records were appended since notify was last closed
	// (SyncBatch, SyncAlways: the flusher closes it).
	unnotified bool
	acks       []ackRange // removals not yet written to acks.log
	acksSpare  []ackRange // recycled by the flusher
	wbuf       []byte     // record encoding scratch
	pend       pending    // records not yet written (pending.go)
	ahead      readBlock  // read's block; its own lock, a leaf: read takes it without mu, seed under mu without waiting
	cover      coverWatch // the last window, watched for the upstream's acks (covered.go)

	// The ids file (ids.go), guarded by mu; the flusher fsyncs idsFile.
	idsFile     durable.File
	idsSeq      uint64
	idsUnsynced bool
	idsDirNew   bool      // created; the directory needs an fsync
	ceiling     ID        // every ID handed out is below it
	idsRetryAt  time.Time // after a failed write, not before this
	idsLoggedAt time.Time

	dropLoggedAt  time.Time // last "spool full" warning
	dropsUnlogged int       // drops since then
	// Counters for Stats.
	appended  uint64
	acked     uint64
	dropped   map[DropReason]uint64
	recovered int64
	// The ledger (ledger.go): removals by reason since the spool was
	// created, and the excess Open found.
	tally    [NumLanes][nRemovals]uint64
	mismatch uint64
	// Lanes (lanes.go): each lane's live IDs in order, and their number.
	laneQ    [NumLanes]laneQueue
	liveLane [NumLanes]int64
	corrupt  int64
	noSpace  uint64
	// Damage found by Open.
	skipped      int64
	damagedBytes int64
	quarantined  int64
	emptied      int64
	ackDamage    int64
	idGap        uint64
}

// batch is one group commit: the appends waiting for the same flush.
// The spool has two (Spool.batches), reused: the next commit's appends
// join one while the flusher completes the other. A batch and its done
// channel per commit were garbage at a sensor fleet's rate (issue 16).
type batch struct {
	cbs []callback // Append and AppendAsync completions, in ID order
}

// callback is an AppendAsync waiting for a group commit.
type callback struct {
	id ID
	fn func(ID, error)
}

// Open opens or creates the spool in opts.Dir and recovers its content:
// damage is repaired, counted in Stats and logged, and costs at most the
// damaged records. Open needs no free disk space. If the directory cannot
// be used at all (created, locked, read; another spool has it open; a file
// of an unknown format version) it returns an *OpenError.
func Open(opts Options) (*Spool, error) {
	if opts.Dir == "" {
		return nil, errors.New("spool: no directory")
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	opts.SegmentSize = min(opts.SegmentSize, maxSegmentSize)
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = DefaultSyncInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.coverGrace <= 0 {
		opts.coverGrace = coverGrace(opts.SyncInterval)
	}
	if opts.coverMaxAge <= 0 {
		opts.coverMaxAge = coverMaxAge
	}
	if opts.ackCompactMin <= 0 {
		opts.ackCompactMin = ackCompactMin
	}
	if opts.Sync > SyncNone {
		return nil, fmt.Errorf("spool: invalid sync mode %d", opts.Sync)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fs := durable.Or(opts.FS)
	if err := fs.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, &OpenError{Dir: opts.Dir, Op: "create directory", Err: err}
	}
	lockPath := filepath.Join(opts.Dir, lockFileName)
	lock, err := fs.Lock(lockPath)
	if errors.Is(err, durable.ErrLocked) {
		err = ErrLocked
	}
	if err != nil {
		return nil, &OpenError{Dir: opts.Dir, Op: "lock", Path: lockPath, Err: err}
	}
	s := &Spool{
		opts:        opts,
		fs:          fs,
		log:         log,
		lock:        lock,
		ackPathName: filepath.Join(opts.Dir, ackFileName),
		pinnedMax:   max(opts.MaxBytes/2, 2*opts.SegmentSize),
		quit:        make(chan struct{}),
		dropped:     make(map[DropReason]uint64),
		cover:       coverWatch{covered: make(chan struct{}, 1)},
	}
	if err := s.recover(); err != nil {
		s.closeFiles()
		return nil, err
	}
	s.cover.next = s.nextID
	// The ceiling Open wrote is durable before the first ID is handed
	// out: a reader may send a record upstream before its commit's
	// fsync (with SyncNone, before any), and after a power cut its ID
	// must not be given to another record (ids.go).
	if err := s.syncIDs(); err != nil {
		s.log.Warn("cannot sync the id high-water mark; will retry", "err", err)
	}
	s.log.Info("spool opened", "dir", opts.Dir, "messages", s.live, "bytes", s.liveBytes,
		"segments", len(s.segs), "next_id", uint64(s.nextID), "corrupt_tails", s.corrupt,
		"skipped", s.skipped, "quarantined", s.quarantined)
	s.flusher = durable.Flusher{Mode: opts.Sync, Interval: opts.SyncInterval,
		Waiting: s.hasWaiters, Due: s.fullCommitDue, Flush: s.flush}
	s.flusher.Start()
	s.kickFlusher() // the checkpoint, the ids fsync
	return s, nil
}

// Stats returns a snapshot of the spool's state and counters.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := make(map[DropReason]uint64, len(s.dropped))
	for k, v := range s.dropped {
		d[k] = v
	}
	return Stats{
		Messages:  s.live,
		Bytes:     s.liveBytes,
		DiskBytes: s.diskBytes,
		Segments:  len(s.segs),
		Appended:  s.appended,
		Acked:     s.acked,
		Dropped:   d,
		Recovered: s.recovered,
		Ledger:    s.ledgerLocked(),

		CorruptTail:   s.corrupt,
		Skipped:       s.skipped,
		DamagedBytes:  s.damagedBytes,
		Quarantined:   s.quarantined,
		EmptySegments: s.emptied,
		AckDamage:     s.ackDamage,
		IDGap:         s.idGap,

		NoSpace:      s.noSpace,
		BytesWritten: s.written.Load(),
		Syncs:        s.syncs.Load(),

		CoveredCommits: s.cover.commits,
		Waiters:        len(s.wakeOnChange),
	}
}

// Close stops the flusher, writes pending acks, fsyncs what is not yet
// synced (in every mode) and closes the files. Appends waiting for a group
// commit are completed first. Close is idempotent.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.notifyLocked()
	s.mu.Unlock()

	close(s.quit)
	s.flusher.Stop()

	s.mu.Lock()
	err := s.failed
	if err == nil {
		// Every record is durable: the next Open may continue the IDs
		// exactly here.
		if werr := s.writeIDsLocked(idsState{clean: true, next: s.nextID, ceiling: s.ceiling}); werr != nil {
			s.log.Warn("cannot mark the spool closed cleanly; ids will skip ahead at the next open", "err", werr)
		}
	}
	s.mu.Unlock()
	if serr := s.syncIDs(); serr != nil {
		s.log.Warn("cannot mark the spool closed cleanly; ids will skip ahead at the next open", "err", serr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log.Info("spool closed", "messages", s.live, "bytes", s.liveBytes, "err", err)
	return errors.Join(err, s.closeFiles())
}

// closeFiles closes every file. Caller holds s.mu or is Open.
func (s *Spool) closeFiles() error {
	var errs []error
	for _, g := range s.segs {
		errs = append(errs, g.f.Close())
	}
	if s.ackFile != nil {
		errs = append(errs, s.ackFile.Close())
	}
	if s.idsFile != nil {
		errs = append(errs, s.idsFile.Close())
	}
	errs = append(errs, s.lock.Close()) // releases the flock
	return errors.Join(errs...)
}

// failLocked makes the spool refuse further appends. Caller holds s.mu.
func (s *Spool) failLocked(err error) {
	if s.failed == nil {
		s.failed = err
		s.log.Error("spool failed, refusing appends", "err", err)
	}
}

// notifyLocked closes notify: the records written so far are there to be
// read. With SyncBatch and SyncAlways the flusher calls it as a flush
// starts (before its fsync), so a waiting reader (the bridge's sender) is
// woken once per group commit with the whole batch, not once per append:
// at a sensor fleet's 500 msg/s that was 500 wake-ups of the sender a
// second, each of which also woke an idle thread. The reader sees a
// record at most one commit window (SyncInterval) after its write, about
// when the local publisher gets its acknowledgement. Caller holds s.mu.
func (s *Spool) notifyLocked() {
	s.unnotified = false
	if s.notify != nil {
		close(s.notify)
		s.notify = nil
	}
	for _, ch := range s.wakeOnChange {
		wake(ch)
	}
	clear(s.wakeOnChange)
	s.wakeOnChange = s.wakeOnChange[:0]
}

// kickFlusher wakes the flusher without blocking.
func (s *Spool) kickFlusher() { s.flusher.Kick() }
