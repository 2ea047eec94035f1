package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/internal/durable"
)

// Sync says when written records are fsynced (persistence.sync): the
// kit's modes, shared with the bridge's spool.
type Sync = durable.SyncMode

// The modes: SyncBatch (one fsync per SyncInterval for everything
// written in it, the zero value), SyncAlways (an fsync as soon as someone
// waits; waiters that arrive meanwhile share the next one), SyncNone
// (written, surviving kill -9, but fsynced only by compaction and Close).
const SyncBatch, SyncAlways, SyncNone = durable.SyncBatch, durable.SyncAlways, durable.SyncNone

// ParseSync parses "always", "batch" or "none".
func ParseSync(s string) (Sync, error) { return durable.ParseSyncMode("state store", s) }

// Refused is the position of a record the store refused (a stalled
// disk with Options.Stall = durable.StallRefuse): WhenDurable and Wait
// report durable.ErrStalled for it, and for any later position combined
// with it by max.
const Refused = ^uint64(0)

// DefaultPendingMax is Options.PendingMax's default.
const DefaultPendingMax = 16384

// Options configure a Store.
type Options struct {
	Dir          string
	Sync         Sync
	SyncInterval time.Duration // batch window; 0 = 20ms
	// CompactRatio: the log is rewritten as a snapshot when it is this many
	// times the live state (and at least CompactMin). 0 = 4.
	CompactRatio int
	CompactMin   int64 // 0 = 1 MiB
	Log          *slog.Logger
	// PendingMax bounds the records appended but not yet written (0 =
	// DefaultPendingMax): when the disk stalls, an append beyond it
	// waits for the flusher or is refused, as Stall says. Records that
	// join an open group (Begin) are not counted: a group is one
	// message's routing, and the flusher holds them until its Commit.
	PendingMax int
	Stall      durable.Stall
	// FS is the seam every file operation goes through; nil: the real
	// file system. A crash-state test records a workload through it.
	FS durable.FS
}

const (
	logName  = "state.log"
	tmpName  = "state.log.tmp"
	lockName = "LOCK"
)

// Stats are the store's counters, for flash-wear accounting.
type Stats struct {
	BytesWritten   int64 // every byte written to the disk: records and snapshots (not state.reserve: 64 KiB once, and again after a full disk)
	RecordBytes    int64 // bytes of records appended (framing included)
	Records        int64 // records appended
	Fsyncs         int64 // file and directory fsyncs
	Compactions    int64 // snapshots written
	LogBytes       int64 // size of state.log now
	LiveBytes      int64 // size a snapshot of the live state has
	SkippedRecords int64 // damaged or unreadable records skipped at Open
	SkippedBytes   int64 // their bytes, torn tails included
	Quarantined    int64 // files moved aside at Open
	WriteErrors    int64
	// CompactionsFailed counts snapshots that could not be written (a
	// full disk); while the file lacks records they are retried with a
	// backoff (flush.go).
	CompactionsFailed int64
	Stalled           int64 // appends refused because the disk stalled (Options.Stall)
	PendingPeak       int64 // the most records that waited to be written at once (bounded by PendingMax)
	Failed            bool  // an fsync failed: nothing written since is promised
}

// Store is the durable broker state: an append-only log of changes
// (state.log) that is rewritten as a snapshot of the live state when it has
// grown CompactRatio times larger than that state. See the package
// documentation for the format and the durability contract.
type Store struct {
	opts  Options
	log   *slog.Logger
	fs    durable.FS
	lock  durable.File
	bound *durable.Bound // the pending records (PendingMax)

	mu       sync.Mutex
	md       *model
	pending  []byte // encoded records not yet written; appended under mu
	spare    []byte
	pos      uint64 // records appended so far (positions start at 1)
	nextSeq  uint64
	waiters  []waiter
	dirty    bool  // the file lacks records the model has: the next flush compacts
	failed   error // an fsync failed
	closed   bool
	fileSize int64 // flusher only, read under mu for Stats
	file     durable.File
	// taken is how many of the records in pending hold a unit of bound
	// (the flusher releases them once they are written).
	taken int64

	// pendingPos (under mu) is the position of the last record in
	// pending: pos, or the one before the open group's (group.go).
	pendingPos uint64
	grp        *Group     // under mu: the open group, which every append joins
	groupMu    sync.Mutex // held from Begin to Commit: one group at a time

	reserveOK   bool      // state.reserve is there; flusher only (or Open)
	reserveNext time.Time // when a flush may try again to recreate it

	// While the file lacks records (dirty) and snapshots fail, the next
	// one is tried no sooner than compactNext (flusher only; flush.go).
	compactNext    time.Time
	compactBackoff time.Duration
	quiet          logLimiter // rate of the full disk's log lines (flusher only)

	durable atomic.Uint64 // highest position written (and synced per the mode)

	flusher durable.Flusher // the group commit

	bytesWritten, recordBytes, records, fsyncs, compactions, writeErrors, stalled atomic.Int64
	compactionsFailed                                                             atomic.Int64
	skippedRecords, skippedBytes, quarantined                                     int64
}

type waiter struct {
	pos uint64
	fn  func(error)
}

// Open loads the state in opts.Dir and starts the store's flusher. A
// damaged state file never makes it fail: damaged records are skipped, an
// unreadable file is moved aside (state.log.corrupt-<unix time>) and
// logged at ERROR. It fails only when the directory cannot be used at all
// (created, locked, written).
func Open(opts Options) (*Store, *State, error) {
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = 20 * time.Millisecond
	}
	if opts.CompactRatio <= 1 {
		opts.CompactRatio = 4
	}
	if opts.CompactMin <= 0 {
		opts.CompactMin = 1 << 20
	}
	lg := opts.Log
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	lg = lg.With("store", "state")
	if opts.PendingMax <= 0 {
		opts.PendingMax = DefaultPendingMax
	}
	fs := durable.Or(opts.FS)
	if err := fs.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("state store: %w", err)
	}
	lock, err := fs.Lock(filepath.Join(opts.Dir, lockName))
	if errors.Is(err, durable.ErrLocked) {
		err = errors.New("in use by another edgegw")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("state store: lock %s: %w", opts.Dir, err)
	}
	s := &Store{opts: opts, log: lg, fs: fs, lock: lock, md: newModel(),
		bound: durable.NewBound(int64(opts.PendingMax))}
	if err := s.load(); err != nil {
		lock.Close()
		return nil, nil, err
	}
	s.nextSeq = s.md.maxSeq + 1
	s.ensureReserve()
	st := s.md.state()
	// SyncNone writes at once: a record must reach the file quickly to
	// survive kill -9.
	s.flusher = durable.Flusher{Mode: opts.Sync, Interval: opts.SyncInterval, NoneAtOnce: true,
		Waiting: s.hasWaiters, Flush: s.flush}
	s.flusher.Start()
	return s, st, nil
}

// load reads state.log into the model and leaves s.file open for appending.
func (s *Store) load() error {
	path := filepath.Join(s.opts.Dir, logName)
	s.fs.Remove(filepath.Join(s.opts.Dir, tmpName)) // an interrupted compaction; state.log is intact
	b, err := s.fs.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		// Unreadable (an I/O error): keep it for inspection, start afresh.
		s.log.Error("state file unreadable; moved aside, starting with empty broker state", "err", err)
		s.quarantine(path)
		b = nil
	}
	compact := true // a new file
	if b != nil {
		compact = s.loadRecords(path, b)
	}
	if compact || s.fileSize > max(s.opts.CompactMin, int64(s.opts.CompactRatio)*s.md.live) {
		if err := s.compact(s.md.snapshot()); err == nil {
			return nil
		} else if b == nil || s.quarantined > 0 {
			return fmt.Errorf("state store: %w", err)
		} else {
			// No room to rewrite it (a full disk): append to the file as it
			// is; the next Open skips the torn tail again.
			s.log.Error("state file could not be rewritten; appending to it as it is", "err", err)
		}
	}
	f, err := s.fs.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("state store: %w", err)
	}
	s.file = f
	return nil
}

// loadRecords applies the records of the file content b to the model and
// reports whether the file must be rewritten. A header that does not read
// (a flipped byte, a zeroed first flash page) is damage, not a reason to
// drop the file: every record has its own length and CRC, and the header
// has a fixed size, so the records are read all the same. Only when none
// of them validates is the file taken as not ours (or, if its header names
// a higher version, as a newer format's), moved aside, and the broker
// starts empty. Version 0 is never a newer format.
func (s *Store) loadRecords(path string, b []byte) (compact bool) {
	why := headerProblem(b)
	if len(b) < headerSize {
		// No record fits: an emptied or torn file, or not ours.
		s.quarantinedLog(path, why, len(b))
		return true
	}
	res := scan(b[headerSize:], func(r rec) { s.md.apply(&r) })
	if why != "" && res.records == 0 {
		s.quarantinedLog(path, why, len(b))
		return true
	}
	s.skippedRecords = int64(res.badRecords)
	s.skippedBytes = res.skipped + res.tail
	if res.tail > 0 {
		s.skippedRecords++
	}
	s.fileSize = int64(headerSize) + res.lastGoodEnd + res.tail
	switch {
	case res.skipped > 0 || res.badRecords > 0:
		// Damage inside the file: keep the original for inspection,
		// continue with every record that could be read.
		s.log.Error("state file damaged; skipped the damaged records, kept the rest; original moved aside",
			"skipped_records", s.skippedRecords, "skipped_bytes", s.skippedBytes, "records", res.records,
			"damaged_header", why)
		s.quarantine(path)
		return true
	case why != "":
		// Only the header: rewrite it in place (needs no free space).
		s.log.Warn("state file header damaged; records intact, header rewritten",
			"reason", why, "header", fmt.Sprintf("%x", b[:headerSize]), "records", res.records,
			"torn_bytes", res.tail)
		if err := rewriteHeader(s.fs, path); err != nil {
			s.log.Error("state file header could not be rewritten; rewriting the file", "err", err)
			return true
		}
		return res.tail > 0
	case res.tail > 0:
		s.log.Warn("state file ends in a torn record (power cut?); dropped it",
			"bytes", res.tail, "records", res.records)
		return true
	case b[4] < formatVersion:
		// An older version's records are this version's too; the
		// snapshot rewrites the file under this version's header before
		// a record only it knows is appended.
		s.log.Info("state file of an older format version; rewritten in this one",
			"version", b[4], "now", formatVersion, "records", res.records)
		return true
	}
	return false
}

// headerProblem says what is wrong with the header at the start of b, or
// "" if it is ours.
func headerProblem(b []byte) string {
	switch {
	case len(b) < headerSize && len(b) > 0 && string(b) == fileMagic[:min(len(b), 4)]:
		return "truncated header"
	case len(b) < headerSize || string(b[:4]) != fileMagic:
		return "not a state file"
	case b[4] > formatVersion:
		return fmt.Sprintf("newer format version %d (this edgegw reads %d)", b[4], formatVersion)
	case b[4] < oldestVersion:
		return fmt.Sprintf("damaged header: format version %d", b[4])
	}
	return ""
}

// rewriteHeader writes a good header over the first bytes of the file at
// path and fsyncs it.
func rewriteHeader(fs durable.FS, path string) error {
	f, err := fs.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("rewrite header: %w", err)
	}
	_, err = f.WriteAt(fileHeader(), 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("rewrite header: %w", err)
	}
	return nil
}

func (s *Store) quarantinedLog(path, why string, size int) {
	s.log.Error("state file unreadable; moved aside, starting with empty broker state", "reason", why, "bytes", size)
	s.quarantine(path)
}

// quarantine renames path to <path>.corrupt-<unix ns>.
func (s *Store) quarantine(path string) {
	s.quarantined++
	dst := fmt.Sprintf("%s.corrupt-%d", path, time.Now().UnixNano())
	if err := s.fs.Rename(path, dst); err != nil {
		s.log.Error("state file could not be moved aside", "err", err)
		return
	}
	s.log.Error("state file moved aside", "path", dst)
}

// compact replaces state.log with data: write a temporary file, fsync it,
// rename it over state.log, fsync the directory. Always fsynced whatever
// the sync mode: a rename of unsynced data over good data could lose both
// in a power cut. When the disk is full (the log filled it) and data fits
// in the reserve's room, it deletes state.reserve and tries once more: the
// rename then frees the log's dead records. Flusher only (or Open).
func (s *Store) compact(data []byte) error {
	err := s.writeSnapshot(data)
	if err != nil && noSpace(err) && s.releaseReserve(len(data)) {
		s.log.Warn("state disk full; writing the snapshot into the reserve's room", "snapshot_bytes", len(data))
		err = s.writeSnapshot(data)
	}
	return err
}

// writeSnapshot is one attempt of compact.
func (s *Store) writeSnapshot(data []byte) error {
	var m durable.Meter
	f, installed, err := durable.Replace(s.fs, filepath.Join(s.opts.Dir, tmpName), filepath.Join(s.opts.Dir, logName), data, true, &m)
	s.bytesWritten.Add(m.Bytes())
	s.fsyncs.Add(m.Syncs())
	if !installed {
		return fmt.Errorf("compact: %w", err)
	}
	if s.file != nil {
		s.file.Close()
	}
	s.file = f
	s.mu.Lock()
	s.fileSize = int64(len(data))
	s.mu.Unlock()
	s.compactions.Add(1)
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	return nil
}

// append encodes r, applies it to the model and returns its position.
// Outside a group it first takes a unit of the pending bound: with a
// stalled disk it waits there, or returns Refused (Options.Stall) and
// the record is neither applied nor written.
func (s *Store) append(r *rec) uint64 {
	s.mu.Lock()
	inGroup := s.grp != nil
	s.mu.Unlock()
	took := false
	if !inGroup {
		if err := s.takeRoom(); errors.Is(err, durable.ErrStalled) {
			s.stalled.Add(1)
			return Refused
		} else if err != nil {
			return 0 // closed
		}
		took = true
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		if took {
			s.bound.Release(1)
		}
		return 0
	}
	if g := s.grp; g != nil {
		// A group opened meanwhile: its records are not counted.
		if took {
			s.bound.Release(1)
		}
		g.recs = append(g.recs, *r)
		s.md.apply(r)
		s.mu.Unlock()
		return g.pos
	}
	if took {
		s.taken++ // else a group closed meanwhile: the record is not counted
	}
	first := len(s.pending) == 0
	n := len(s.pending)
	s.pending = appendRec(s.pending, r)
	s.recordBytes.Add(int64(len(s.pending) - n))
	s.records.Add(1)
	s.md.apply(r)
	s.pos++
	s.pendingPos = s.pos
	p := s.pos
	s.mu.Unlock()
	if first {
		s.wake()
	}
	return p
}

func (s *Store) wake() { s.flusher.Kick() }

// RetainSet records a retained message (replacing the topic's previous one).
func (s *Store) RetainSet(m Msg) uint64 { return s.append(&rec{op: opRetainSet, msg: m}) }

// RetainDel records that topic has no retained message any more.
func (s *Store) RetainDel(topic string) uint64 { return s.append(&rec{op: opRetainDel, topic: topic}) }

// SessionPut records a persistent session's own state (creating it).
func (s *Store) SessionPut(client string, m SessionMeta) uint64 {
	m.OwnerKnown = true // every record written now carries the owner
	return s.append(&rec{op: opSessionPut, client: client, meta: m})
}

// SessionDel removes a session and everything it holds.
func (s *Store) SessionDel(client string) uint64 {
	return s.append(&rec{op: opSessionDel, client: client})
}

// SubPut records a subscription (replacing one on the same filter).
func (s *Store) SubPut(client string, sub Sub) uint64 {
	return s.append(&rec{op: opSubPut, client: client, sub: sub})
}

// SubDel removes a subscription.
func (s *Store) SubDel(client, filter string) uint64 {
	return s.append(&rec{op: opSubDel, client: client, topic: filter})
}

// QAdd records a message queued for a session and returns its sequence
// number (queue order, and its name in QDel/QSent/QReleased).
func (s *Store) QAdd(client string, e Entry) (seq, pos uint64) {
	s.mu.Lock()
	seq = s.nextSeq
	s.nextSeq++
	s.mu.Unlock()
	e.Seq = seq
	return seq, s.append(entryRec(client, &e))
}

// QDel removes a queued or in-flight message (acknowledged, dropped or expired).
func (s *Store) QDel(client string, seq uint64) uint64 {
	return s.append(&rec{op: opQDel, client: client, seq: seq})
}

// QSent records the packet id a QoS 2 message was sent with.
func (s *Store) QSent(client string, seq uint64, pid uint16) uint64 {
	return s.append(&rec{op: opQSent, client: client, seq: seq, pid: pid})
}

// QReleased records PUBREC for a QoS 2 message: only its PUBREL is due.
func (s *Store) QReleased(client string, seq uint64) uint64 {
	return s.append(&rec{op: opQReleased, client: client, seq: seq})
}

// InQoS2 records an inbound QoS 2 packet id whose PUBREL has not come.
func (s *Store) InQoS2(client string, pid uint16) uint64 {
	return s.append(&rec{op: opInQoS2, client: client, pid: pid})
}

// InQoS2Del records the PUBREL of an inbound QoS 2 packet id.
func (s *Store) InQoS2Del(client string, pid uint16) uint64 {
	return s.append(&rec{op: opInQoS2Del, client: client, pid: pid})
}

// WhenDurable calls fn once the record at pos (and every one before it) is
// kept per the sync mode, or with the error that prevents it. fn is called
// from the flusher goroutine, or at once; it must not block.
func (s *Store) WhenDurable(pos uint64, fn func(error)) {
	if pos == Refused {
		fn(durable.ErrStalled)
		return
	}
	s.mu.Lock()
	if err := s.failed; err != nil || pos <= s.durable.Load() {
		s.mu.Unlock()
		fn(err)
		return
	}
	if s.closed {
		s.mu.Unlock()
		fn(errors.New("state store closed"))
		return
	}
	s.waiters = append(s.waiters, waiter{pos, fn})
	s.mu.Unlock()
	s.wake()
}

// Wait blocks until the record at pos is kept per the sync mode.
func (s *Store) Wait(pos uint64) error {
	ch := make(chan error, 1)
	s.WhenDurable(pos, func(err error) { ch <- err })
	return <-ch
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	_, peak := s.bound.Pending()
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{
		BytesWritten: s.bytesWritten.Load(), RecordBytes: s.recordBytes.Load(), Records: s.records.Load(),
		Fsyncs: s.fsyncs.Load(), Compactions: s.compactions.Load(), LogBytes: s.fileSize + int64(len(s.pending)),
		LiveBytes: s.md.live + headerSize, SkippedRecords: s.skippedRecords, SkippedBytes: s.skippedBytes,
		Quarantined: s.quarantined, WriteErrors: s.writeErrors.Load(), Failed: s.failed != nil,
		CompactionsFailed: s.compactionsFailed.Load(),
		Stalled:           s.stalled.Load(), PendingPeak: peak,
	}
}

// Close writes and fsyncs everything, rewrites the log as a snapshot if it
// holds dead records (a cleaned or expired session then leaves no trace),
// and stops the flusher. Appends after Close are ignored.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.flusher.Stop()
	s.bound.Close()
	s.mu.Lock()
	err := s.failed
	s.mu.Unlock()
	if s.file != nil {
		s.file.Close()
	}
	s.lock.Close()
	return err
}

// fileErr names state.log in an error of s.file: after a compaction the
// handle is the snapshot's, and its errors would name state.log.tmp, the
// name it was created under before the rename.
func (s *Store) fileErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return &os.PathError{Op: pe.Op, Path: filepath.Join(s.opts.Dir, logName), Err: pe.Err}
	}
	return err
}
