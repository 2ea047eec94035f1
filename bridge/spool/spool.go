package spool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
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

// Append stores m and returns its ID once it is durable as Options.Sync
// says. If ctx ends while waiting for the fsync, Append returns the ID with
// ctx's error: the record is in the spool and will most likely be
// delivered, but the caller must not treat it as durable (with SyncBatch
// and SyncAlways it may not even be written yet, and a failed commit write
// refuses it and gives its ID to a later record, pending.go).
//
// If the spool is full the oldest messages are dropped to make room (see
// the package documentation); a message whose topic+payload exceeds
// MaxBytes fails with ErrTooLarge.
//
// Append is AppendAsync plus a wait: one goroutine gets at most one
// message per group commit through it.
func (s *Spool) Append(ctx context.Context, m Message) (ID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	// Its own result, not the batch's: a failed commit write refuses the
	// records in it (pending.go) and fails no other.
	type result struct {
		id  ID
		err error
	}
	res := make(chan result, 1)
	id, b, err := s.write(&m, func(id ID, err error) { res <- result{id, err} })
	if err != nil || b == nil {
		return id, err
	}
	select {
	case r := <-res:
		return r.id, r.err
	case <-ctx.Done():
		return id, ctx.Err()
	}
}

// AppendAsync stores m like Append but does not wait for the fsync: the
// record is appended (under the spool's lock, with the same overflow
// policy and checks as Append) before AppendAsync returns, so it is
// visible to Next and Peek, and IDs follow the order of the calls. It is
// written (pwrite) by then with SyncNone and at QoS 0, else by the flush
// that commits it, before done (pending.go): it survives kill -9 from
// the moment anyone is told it is kept. m.Payload is not retained.
//
// done is called exactly once, without any spool lock held:
//
//   - with the record's ID and nil once it is durable as Options.Sync says:
//     after the group commit that covers it (SyncBatch, SyncAlways), or at
//     once after the write (SyncNone);
//   - with (0, err) if the message was not stored (ErrTooLarge, an invalid
//     QoS, a write error, a failed spool, or ErrClosed after Close);
//   - with (id, err) if the record was written but the fsync covering it
//     failed (the spool is then failed).
//
// Close completes every pending done: its final fsync covers every record
// written before it, so they get nil (or the fsync's error). No done is
// left pending after Close returns, and none gets ErrClosed for a record
// that was written.
//
// done may run before AppendAsync returns, on the calling goroutine (an
// immediate failure, SyncNone), or later on the spool's flusher goroutine,
// which calls the dones of one group commit in ID order. It must be cheap
// and must not block: the next group commit waits for it. It may call the
// spool's methods.
func (s *Spool) AppendAsync(m Message, done func(ID, error)) {
	id, b, err := s.write(&m, done)
	if err != nil || b == nil {
		done(id, err)
	}
}

// write validates m, makes room, appends its record to the active segment
// and, unless the mode is SyncNone, joins the next group commit: it
// returns that batch, with done (if not nil) registered on it. A nil batch
// and nil error means the record needs no fsync wait (SyncNone). On error
// nothing was stored and done is not registered.
func (s *Spool) write(m *Message, done func(ID, error)) (ID, *batch, error) {
	size := msgSize(m)
	switch {
	case size > s.opts.MaxBytes || size > maxMessageBytes:
		return 0, nil, fmt.Errorf("%w: %d bytes, max_bytes %d", ErrTooLarge, size, min(s.opts.MaxBytes, maxMessageBytes))
	case len(m.Topic) > maxTopicLen:
		return 0, nil, fmt.Errorf("%w: topic of %d bytes", ErrTooLarge, len(m.Topic))
	case m.QoS > 2:
		return 0, nil, fmt.Errorf("spool: invalid qos %d", m.QoS)
	case m.Lane >= NumLanes:
		return 0, nil, fmt.Errorf("spool: invalid lane %d", m.Lane)
	}
	recLen := size + recOverhead

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, nil, ErrClosed
	}
	if s.failed != nil {
		err := s.failed
		s.mu.Unlock()
		return 0, nil, err
	}
	s.makeRoomLocked(size)
	g, err := s.activeLocked(recLen)
	if err != nil {
		// Nothing was written: not a reason to fail the spool.
		err = s.writeErrLocked("new segment", err)
		s.mu.Unlock()
		return 0, nil, err
	}
	id := s.nextID
	if !s.writeNow(m.QoS) {
		s.addPendingLocked(g, g.size, id, m) // written by the flush (pending.go)
	} else {
		// Behind what is pending: the file keeps the order of the IDs.
		if err := s.writePendingLocked(); err != nil {
			if errors.Is(err, ErrNoSpace) {
				s.noSpace++ // this append, refused with the pending ones
			}
			s.mu.Unlock()
			return 0, nil, err
		}
		s.wbuf = appendRecord(s.wbuf[:0], id, m)
		if _, err := g.f.WriteAt(s.wbuf, g.size); err != nil {
			// Cut off whatever part was written so the next record does not
			// land behind garbage.
			if terr := g.f.Truncate(g.size); terr != nil {
				s.failLocked(fmt.Errorf("spool: write: %w (truncate: %v)", err, terr))
			}
			err = s.writeErrLocked("write", err)
			s.mu.Unlock()
			return 0, nil, err
		}
		s.written.Add(uint64(len(s.wbuf)))
		s.ahead.seed(g.f, g.size, s.wbuf)
		if cap(s.wbuf) > 1<<20 {
			s.wbuf = nil // do not pin a huge buffer after a huge message
		}
	}
	g.add(g.size, recLen, m.Lane)
	s.laneQ[m.Lane].push(id)
	s.liveLane[m.Lane]++
	s.markUnsyncedLocked(g)
	s.nextID++
	s.raiseCeilingLocked()
	s.live++
	s.liveBytes += size
	s.diskBytes += recLen
	s.appended++
	if s.opts.Sync == SyncNone {
		s.notifyLocked()
		s.mu.Unlock()
		return id, nil, nil
	}
	// The reader (Changed, Next) learns of the record from the flusher,
	// once per group commit, not per append: see notifyLocked.
	s.unnotified = true
	b := s.joinBatchLocked()
	if done != nil {
		b.cbs = append(b.cbs, callback{id, done})
	}
	s.kickFlusher()
	s.mu.Unlock()
	return id, b, nil
}

// joinBatchLocked returns the batch of the next flush, starting it if
// there is none: the one of the spool's two batches the flusher is not
// completing. Caller holds s.mu.
func (s *Spool) joinBatchLocked() *batch {
	if s.batch == nil {
		s.batch = &s.batches[0]
		if s.flushing == s.batch {
			s.batch = &s.batches[1]
		}
	}
	return s.batch
}

// writeErrLocked wraps an error of the append path; a full disk becomes
// ErrNoSpace (counted). Caller holds s.mu.
func (s *Spool) writeErrLocked(op string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		s.noSpace++
		return fmt.Errorf("%w: %s: %w", ErrNoSpace, op, err)
	}
	return fmt.Errorf("spool: %s: %w", op, err)
}

// makeRoomLocked drops the oldest live records until size more bytes fit.
// Caller holds s.mu.
func (s *Spool) makeRoomLocked(size int64) {
	n := 0
	for s.live > 0 && (s.liveBytes+size > s.opts.MaxBytes || s.pinned > s.pinnedMax) {
		// Over MaxBytes, the lowest lane pays first; too many pinned
		// bytes are freed by the oldest record, whatever its lane.
		g, i := s.oldestLocked()
		if s.liveBytes+size > s.opts.MaxBytes {
			g, i = s.victimLocked()
		}
		if !s.flushPendingFor(g, i) {
			continue // the pending records were refused and taken back
		}
		s.removeLocked(g, i, DropSpoolFull)
		n++
	}
	if n == 0 {
		return
	}
	// A full spool drops on every append: log at most every dropLogEvery.
	s.dropsUnlogged += n
	if now := time.Now(); now.Sub(s.dropLoggedAt) >= dropLogEvery {
		s.log.Warn("spool full, dropping oldest messages", "reason", DropSpoolFull,
			"count", s.dropsUnlogged, "bytes", s.liveBytes, "max_bytes", s.opts.MaxBytes)
		s.dropLoggedAt, s.dropsUnlogged = now, 0
	}
}

// oldestLocked returns the oldest live record. Caller holds s.mu and
// s.live > 0.
func (s *Spool) oldestLocked() (*segment, int) {
	for _, g := range s.segs {
		if g.live > 0 {
			i := g.nextLive(g.lo)
			g.lo = i
			return g, i
		}
	}
	panic("spool: live count out of sync")
}

// activeLocked returns the segment to append recLen bytes to, sealing the
// current one and starting a new one when it is full. Caller holds s.mu.
func (s *Spool) activeLocked(recLen int64) (*segment, error) {
	if n := len(s.segs); n > 0 && !s.segs[n-1].sealed {
		g := s.segs[n-1]
		if g.count() == 0 || g.size+recLen <= s.opts.SegmentSize {
			return g, nil
		}
		if err := s.writePendingLocked(); err != nil {
			return nil, err
		}
		s.sealLocked(g)
	}
	return s.createSegmentLocked(s.nextID)
}

// sealLocked ends appends to g. Its unsynced tail is still queued for the
// flusher, so no fsync happens under the lock. Caller holds s.mu.
func (s *Spool) sealLocked(g *segment) {
	g.sealed = true
	s.pinned += g.dead
	if g.live == 0 {
		s.deleteSegmentLocked(g)
	}
}

// createSegmentLocked starts a segment; the flusher fsyncs it and the
// directory before any Append waiting on a record in it returns. Caller
// holds s.mu.
func (s *Spool) createSegmentLocked(base ID) (*segment, error) {
	path := segPath(s.opts.Dir, base)
	f, err := s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err = f.Write(segHeader(base)); err != nil {
		f.Close()
		s.fs.Remove(path)
		return nil, err
	}
	s.written.Add(segHeaderSize)
	g := &segment{base: base, path: path, f: f, size: segHeaderSize, dead: segHeaderSize, newFile: true}
	s.segs = append(s.segs, g)
	s.diskBytes += segHeaderSize
	s.markUnsyncedLocked(g)
	return g, nil
}

// markUnsyncedLocked queues g for the flusher's next fsync (in SyncNone
// only Close syncs, and it finds g by its flag). Caller holds s.mu.
func (s *Spool) markUnsyncedLocked(g *segment) {
	if !g.unsynced && s.opts.Sync != SyncNone {
		s.unsynced = append(s.unsynced, g)
	}
	g.unsynced = true
}

// deleteSegmentLocked removes a sealed segment with no live record. A
// reader holding g.f gets os.ErrClosed. Caller holds s.mu.
func (s *Spool) deleteSegmentLocked(g *segment) {
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base >= g.base })
	if i == len(s.segs) || s.segs[i] != g {
		return
	}
	s.segs = slices.Delete(s.segs, i, i+1)
	s.diskBytes -= g.size
	s.pinned -= g.dead
	g.f.Close()
	// Not fsyncing the directory: a segment that comes back after a power
	// loss is covered by acks.log or, at worst, re-sent.
	if err := s.fs.Remove(g.path); err != nil {
		s.log.Warn("delete segment", "segment", filepath.Base(g.path), "err", err)
	}
}

// removeLocked marks record i of g as gone (acked if reason is "", else
// dropped) and queues it for acks.log. Caller holds s.mu.
func (s *Spool) removeLocked(g *segment, i int, reason DropReason) {
	n := g.recLen(i)
	g.setRemoved(i)
	g.live--
	g.dead += n
	if i == g.lo {
		if g.lo = g.nextLive(i); g.lo < 0 {
			g.lo = g.count()
		}
	}
	s.live--
	s.liveBytes -= n - recOverhead
	if reason == "" {
		s.acked++
	} else {
		s.dropped[reason]++
	}
	why, lane := removalOf(reason), g.lanes[i]
	s.tally[lane][why]++
	s.liveLane[lane]--
	id := g.base + ID(i)
	s.coverRemovedLocked(id)
	if k := len(s.acks); k > 0 && s.acks[k-1].last+1 == id && s.acks[k-1].why == why && s.acks[k-1].lane == lane {
		s.acks[k-1].last = id
	} else {
		s.acks = append(s.acks, ackRange{id, id, why, lane})
	}
	if g.sealed {
		s.pinned += n
		if g.live == 0 {
			s.deleteSegmentLocked(g)
		}
	}
	s.kickFlusher()
}

// locateLocked finds record id. Caller holds s.mu.
func (s *Spool) locateLocked(id ID) (*segment, int) {
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base > id }) - 1
	if i < 0 {
		return nil, 0
	}
	g := s.segs[i]
	if j := int(id - g.base); j < g.count() {
		return g, j
	}
	return nil, 0
}

// Ack removes an upstream-acknowledged message. Acks may come in any order;
// acking a message that is already gone (acked twice, or dropped) is a
// no-op. The ack reaches disk within one SyncInterval.
func (s *Spool) Ack(id ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if id == 0 || id >= s.nextID {
		return fmt.Errorf("spool: ack of unknown id %d", id)
	}
	if g, i := s.locateLocked(id); g != nil && !g.isRemoved(i) && s.flushPendingFor(g, i) {
		s.removeLocked(g, i, "")
	}
	return nil
}

// Drop removes a message without an upstream ack, counted under reason
// (DropRefused: the upstream refused it). Dropping a message that is
// already gone is a no-op.
func (s *Spool) Drop(id ID, reason DropReason) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if id == 0 || id >= s.nextID {
		return fmt.Errorf("spool: drop of unknown id %d", id)
	}
	if g, i := s.locateLocked(id); g != nil && !g.isRemoved(i) && s.flushPendingFor(g, i) {
		s.removeLocked(g, i, reason)
	}
	return nil
}

// drop is Drop for a record the spool just read.
func (s *Spool) drop(id ID, reason DropReason) {
	if err := s.Drop(id, reason); err != nil && !errors.Is(err, ErrClosed) {
		s.log.Error("drop", "id", uint64(id), "reason", reason, "err", err)
	}
}

// expired reports whether m's expiry has passed: it is dropped, never
// returned.
func (s *Spool) expired(m *Message) bool {
	return !m.Expiry.IsZero() && !s.opts.Now().Before(m.Expiry)
}

// recLoc is where a live record is, captured under s.mu, read without it.
type recLoc struct {
	id  ID
	f   durable.File
	off int64
	n   int64
	end int64 // the segment's valid size when captured: bytes below it never change
}

// locOfLocked returns where record i of g is, which must be written
// (flushPendingFor). end is what is written of g, not what is pending:
// read's read-ahead must not cache bytes a failed write cuts off again.
// Caller holds s.mu.
func (s *Spool) locOfLocked(g *segment, i int) recLoc {
	return recLoc{id: g.base + ID(i), f: g.f, off: int64(g.offs[i]), n: g.recLen(i), end: s.writtenEnd(g)}
}

// scanLocked appends to out up to limit live records with IDs above after.
// Caller holds s.mu.
func (s *Spool) scanLocked(after ID, limit int, out []recLoc) []recLoc {
	from := after + 1
	k := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base > from }) - 1
	for k = max(k, 0); k < len(s.segs) && len(out) < limit; k++ {
		g := s.segs[k]
		if g.live == 0 {
			continue
		}
		i := 0
		if from > g.base {
			if from-g.base >= ID(g.count()) {
				continue
			}
			i = int(from - g.base)
		}
		for i = g.nextLive(i); i >= 0 && len(out) < limit; i = g.nextLive(i + 1) {
			if !s.flushPendingFor(g, i) {
				return out // taken back: they were the newest
			}
			out = append(out, s.locOfLocked(g, i))
		}
	}
	return out
}

// read loads one record. os.ErrClosed means its segment was deleted (the
// record was removed meanwhile).
//
// It reads ahead: one pread fetches up to readAhead bytes of the segment
// (only below its valid size when the record was located, which no later
// write changes), and the next records are decoded from that block. The
// bridge's sender reads records in order, a batch per group commit or a
// whole backlog, and a pread per record was the costliest part of its
// pick (4 % of edgegw's CPU in a 20,000-message drain). The block is
// reused: the message's topic and payload are copied out of it, in one
// allocation (ownBytes).
func (s *Spool) read(l recLoc) (Message, error) {
	if l.n > readAhead || l.end < l.off+l.n {
		buf := make([]byte, l.n)
		if _, err := l.f.ReadAt(buf, l.off); err != nil {
			return Message{}, err
		}
		return decodeRecord(buf, l.id)
	}
	c := &s.ahead
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != l.f || l.off < c.off || l.off+l.n > c.off+int64(len(c.buf)) {
		if c.buf == nil {
			c.buf = make([]byte, readAhead)
		}
		c.f = nil
		n, err := l.f.ReadAt(c.buf[:min(readAhead, l.end-l.off)], l.off)
		if int64(n) < l.n {
			return Message{}, err
		}
		c.f, c.off, c.buf = l.f, l.off, c.buf[:n]
	}
	at := l.off - c.off
	m, err := decodeRecord(c.buf[at:at+l.n], l.id)
	if err == nil {
		m.ownBytes()
	}
	return m, err
}

// readAhead is the most one read of a segment fetches (read).
const readAhead = 32 << 10

// readBlock is the segment bytes read last (read), reused.
type readBlock struct {
	mu  sync.Mutex
	f   durable.File // nil: empty
	off int64
	buf []byte // bytes [off, off+len(buf)) of f
}

// seed puts the bytes just written at off of f in the block, so that the
// sender, woken as the commit starts, reads the window from memory and
// not with a pread (issue 16: at sensor rates that pread was one of the
// three ordinary system calls of each commit, and the first such call
// after the process went idle wakes the runtime's sysmon thread). They
// extend the block when they follow it and fit; otherwise they replace it
// if they fit alone: a sender reading an older backlog from the block
// then reads it again, one pread per commit at most. Only bytes written
// whole may be seeded: a failed write is cut off again.
//
// The caller holds the spool's mu, and read holds c.mu across its pread:
// waiting for c.mu here would hold every append, ack and scan behind a
// reader's disk read (a cold backlog on a slow SD card). A block in use
// is not seeded: the seed is only a saving, and the reader replaces the
// block anyway.
func (c *readBlock) seed(f durable.File, off int64, b []byte) {
	if !c.mu.TryLock() {
		return
	}
	defer c.mu.Unlock()
	switch {
	case c.f == f && c.off+int64(len(c.buf)) == off && len(c.buf)+len(b) <= readAhead:
		c.buf = append(c.buf, b...)
	case len(b) <= readAhead:
		if c.buf == nil {
			c.buf = make([]byte, 0, readAhead)
		}
		c.f, c.off, c.buf = f, off, append(c.buf[:0], b...)
	}
}

// readFailed handles a record that could not be read back: unless its
// segment was deleted under us, it is dropped so the queue keeps moving.
func (s *Spool) readFailed(l recLoc, err error) {
	if errors.Is(err, os.ErrClosed) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, i := s.locateLocked(l.id); g != nil && !g.isRemoved(i) {
		s.log.Error("unreadable record dropped", "reason", DropCorrupt, "id", uint64(l.id), "err", err)
		s.removeLocked(g, i, DropCorrupt)
	}
}

// Next returns the oldest unacked message with an ID above after, waiting
// until there is one or ctx ends. The bridge keeps up to max_inflight
// messages in flight by passing the last ID it sent; after a reconnect,
// Next(ctx, 0) starts again from the oldest unacked message, so every
// unacked message is re-sent in order.
func (s *Spool) Next(ctx context.Context, after ID) (ID, Message, error) {
	var one [1]recLoc
	for {
		if err := ctx.Err(); err != nil {
			return 0, Message{}, err
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return 0, Message{}, ErrClosed
		}
		locs := s.scanLocked(after, 1, one[:0])
		if len(locs) == 0 {
			if s.notify == nil {
				s.notify = make(chan struct{})
			}
			ch := s.notify
			s.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return 0, Message{}, ctx.Err()
			}
			continue
		}
		s.mu.Unlock()
		m, err := s.read(locs[0])
		switch {
		case err != nil:
			s.readFailed(locs[0], err)
		case s.expired(&m):
			s.drop(locs[0].id, DropExpired)
			after = locs[0].id
		default:
			return locs[0].id, m, nil
		}
	}
}

// Peek returns up to n unacked messages with IDs above after, oldest
// first, without waiting.
func (s *Spool) Peek(after ID, n int) ([]Entry, error) {
	if n <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	locs := s.scanLocked(after, n, make([]recLoc, 0, min(n, 64)))
	s.mu.Unlock()
	out := make([]Entry, 0, len(locs))
	for _, l := range locs {
		m, err := s.read(l)
		if err != nil {
			s.readFailed(l, err)
			continue
		}
		if s.expired(&m) {
			s.drop(l.id, DropExpired)
			continue
		}
		out = append(out, Entry{ID: l.id, Message: m})
	}
	return out, nil
}

// Get returns record id if it is still in the spool (ok false: acked,
// dropped, or not written). An expired one is dropped, as by Next, and not
// returned; an unreadable one is dropped as corrupt. Unlike Peek(id-1, 1)
// it never reads another record: the bridge re-reads a record the
// upstream refused for now, and the record after it may be in flight,
// sent before it expired, which must not be dropped as expired under its
// acker.
func (s *Spool) Get(id ID) (m Message, ok bool, err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return m, false, ErrClosed
	}
	g, i := s.locateLocked(id)
	if g == nil || g.isRemoved(i) || !s.flushPendingFor(g, i) {
		s.mu.Unlock()
		return m, false, nil
	}
	l := s.locOfLocked(g, i)
	s.mu.Unlock()
	m, err = s.read(l)
	switch {
	case err != nil:
		s.readFailed(l, err)
		return Message{}, false, nil
	case s.expired(&m):
		s.drop(id, DropExpired)
		return Message{}, false, nil
	}
	return m, true, nil
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
