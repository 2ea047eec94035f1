// Package spool is the bridge's durable store-and-forward queue.
//
// A message bound for the cloud broker is appended to the spool before the
// gateway acknowledges it to the sensor (PUBACK/PUBREC), and it is removed
// only when the upstream broker has acknowledged it (docs/design.md, principle 2).
// The bridge is the only user: AppendAsync (or Append) on the receive path,
// Head (by lane), Get (a record to send again) and Ack or Drop on the
// uplink path; Next and Peek read across lanes.
//
// # On disk
//
// A spool directory holds:
//
//	LOCK                      flock(2)ed while a process has the spool open
//	0000000000000001.seg      segments, named by the hex ID of their first record
//	0000000000000a3c.seg      ... only the newest one (the active one) is appended to
//	acks.log                  removed-ID ranges (acks and drops)
//	acks.log.tmp              a checkpoint being written; deleted at Open
//	ids                       the ID high-water mark and the clean-stop mark (ids.go)
//	*.quarantine              unreadable files Open moved aside, kept for inspection
//
// A segment starts with a 16-byte header
//
//	"EGSP" | version (1 byte, =1) | 3 reserved bytes | first ID (uint64 LE)
//
// followed by records, all integers little endian:
//
//	length uint32 | crc32c(body) uint32 | body
//	body = id uint64 | flags uint8 (bits 0-1 QoS, bit 2 retain) |
//	       topic length uint16 | topic | payload
//
// IDs are consecutive inside a segment (first ID, first ID+1, ...) and grow
// monotonically across segments and restarts. Segments are append-only and
// never rewritten; a new one is started when the active one would exceed
// Options.SegmentSize, and a sealed segment is deleted as soon as every
// record in it is acked or dropped.
//
// acks.log starts with an 8-byte header ("EGAK" | version | 3 reserved) and
// holds fixed 24-byte records
//
//	crc32c(rest) uint32 | kind uint8 | reason uint8 | 2 reserved | first uint64 | last uint64
//
// kind 1 marks the IDs first..last as removed, and counts them under
// reason (1 delivered, 2 spool_full, 3 corrupt, 4 expired, 5 refused,
// 6 lost, 7 gap; 0 unknown, as format 1 wrote; 0xff tallied: removed,
// counted by the checkpoint's tallies). kind 2 (checkpoints only) holds in
// first the count of all removals for reason. See ledger.go.
//
// Consecutive removals for the same reason coalesce into one range, so an
// in-order ack stream costs one record per flush. When the
// file has grown past a threshold it is replaced by a checkpoint (written to
// acks.log.tmp, fsynced, renamed): one range 1..W, where W is just below the
// oldest live record, plus the removed ranges above W (out-of-order acks),
// all tallied, plus one tally per reason, every entry written twice (a checkpoint is small and holds the whole ack
// state). The flusher writes one soon after every Open, which also drops
// damaged entries; Open itself writes nothing that needs free space.
//
// Segments and the ids file are format version 1, acks.log version 2
// (version 2 added the reason byte and the tallies, and reads version 1
// files, whose removals count as unknown: TestLedgerReadsFormat1; an older
// spool refuses version 2 as unknown). The ids file was added without
// changing the other two, and a spool without it (written before it
// existed) opens as before and gets one (TestReadsMainFormat). A header
// that does not read is damage, and the records behind it decide: if any
// validates under this format, the header is rewritten and nothing else is
// lost (a flipped version byte, version 0 which nothing wrote). Only a
// header with our magic, zero reserved bytes and a higher version, followed
// by bytes of which no record reads, makes Open fail with ErrUnknownVersion
// and touch nothing: a newer format is not guessed at. A header alone
// holds nothing to misread: a higher version there is damage.
//
// # Durability contract
//
// A record is written to the active segment (pwrite) before anyone is told
// it is kept, so from then on it survives kill -9 in every mode: with
// SyncNone, and a QoS 0 record in every mode, before Append or AppendAsync
// returns; with SyncBatch and SyncAlways a QoS 1/2 record is encoded into
// a pending buffer, and the flush that commits it writes all the window's
// records in one pwrite before its fsync (pending.go;
// TestCommitWritesItsRecords). A reader that reaches a pending record
// writes the buffer first. If that write fails (a full disk) the records
// in it are refused as their appends would have been: taken back out of
// the spool, ErrNoSpace to their dones, the spool not failed
// (TestFailedCommitWriteRefusesItsRecords). Against power loss, Append
// returns (and AppendAsync calls its done with nil):
//
//   - SyncAlways: after an fsync that covers the record. Concurrent
//     appenders share an fsync (the flusher starts one as soon as someone
//     waits, and everyone who wrote meanwhile rides the next one).
//   - SyncBatch: after the group commit that covers it: the flusher waits
//     Options.SyncInterval after the first write, then does one fsync for
//     every record written in that window. A commit whose whole window
//     has been acked upstream by then (waited for briefly when the last
//     window was acked in time) skips the fsync: a covered commit
//     (covered.go, Stats.CoveredCommits).
//   - SyncNone: at once; the spool never fsyncs a record except on Close,
//     the OS decides (but the ids file, see below, is fsynced in every
//     mode).
//
// Append blocks its caller for that wait, so one goroutine gets at most one
// message per window through it. AppendAsync returns after the write and
// reports durability through a callback, called exactly once and without
// spool locks held, by the flusher in ID order after the group commit; so
// one goroutine can put any number of records into one commit. Close
// completes every pending callback: its final fsync covers every record
// written before it, so they get nil (or that fsync's error), never
// ErrClosed; only an AppendAsync called after Close gets ErrClosed.
//
// Every fsync is done by one flusher goroutine, never under the spool's
// lock: the ids file if it changed (in every sync mode: an ID must never
// be handed out twice, ids.go), each segment written since the last
// flush, the directory if a segment was created (so its name survives),
// then acks.log. Open fsyncs the ids file it wrote before it returns.
// Every file operation goes through Options.FS (internal/durable's seam:
// the real file system, or a recorder a crash-state test explores), and
// the lock, the sync modes, the group-commit flusher and the checkpoint's
// write-fsync-rename are internal/durable's, shared with the state store. Stats.BytesWritten and Stats.Syncs count every byte
// written to the spool's files and every fsync (flash wear). If a write or
// an fsync fails the spool is failed: the waiting and every later Append
// return the error, and the pending and later AppendAsyncs report it to
// their done (a failed fsync may have dropped dirty pages; retrying it
// would lie).
//
// Acks are best effort by design (QoS 1 is at-least-once): they are buffered
// in memory and written to acks.log by the flusher, with an fsync in
// SyncBatch/SyncAlways (a covered commit's within a second), within one
// SyncInterval. A crash can forget the acks
// of the last window, so those messages are sent again after a restart.
// Within one flush the segment is synced before the acks are written, so a
// durable ack never refers to a record that is not durable.
//
// Next and Peek see a record as soon as it is appended, before its fsync, so
// the bridge may already send it upstream while its Append still waits.
// A reader waiting for new records (Changed, WakeOnChange, Next) is woken once per group
// commit, as the flush starts and before its fsync (with SyncNone: at the
// append), not once per append.
// After a power loss such a record may be gone (it was never confirmed to
// the sensor); its ID is not given to a new record, because after an
// unclean stop IDs continue above the high-water mark (ids.go).
//
// # Damage
//
// Damage costs the damaged records and no more; Open repairs, counts (Stats)
// and logs it, and succeeds. Open scans every segment that still holds live
// records (segments entirely covered by acks.log are deleted unread) and
// verifies each record's length, CRC32C and ID:
//
//   - A bad record in the middle of a segment (bit rot, a bad flash page) is
//     skipped: reading resynchronises on the next valid record, found by
//     scanning forward for a length, ID (in the range the skipped bytes can
//     hold), flags and CRC that all check out. The skipped IDs are counted
//     (Stats.Skipped, Dropped[DropCorrupt]), logged at ERROR with the path,
//     and written to acks.log as dropped, so the next Open does not count
//     them again. 1,000 records in one segment, one byte flipped halfway:
//     999 are served (TestFlippedByteMidSegment; every byte of a record
//     flipped in turn loses exactly that record, TestFlipEveryByteOfMiddleRecord).
//   - Bad bytes up to the end of a segment (a torn write, or damage in the
//     last record) are cut off (Stats.CorruptTail, WARN).
//   - A damaged segment header is rewritten if records follow it. A segment
//     with no readable record that holds only zeros or a prefix of its
//     header (emptied by a power cut, or torn while being created) is
//     removed with a WARN (Stats.EmptySegments); one holding anything else
//     is renamed to *.quarantine and logged at ERROR with its path
//     (Stats.Quarantined).
//   - acks.log entries have a fixed size and their own CRC: a bad one is
//     skipped and the rest are read; an emptied, missing or unreadable file
//     (the latter is quarantined) loses its acks. Either way Open logs a
//     WARN with may_resend, the number of live messages that may have been
//     acked already (an upper bound; they are sent again: at least once).
//     3,000 acked messages with one unacked before them: any single flipped
//     byte but the version byte re-sends none; an emptied acks.log re-sends
//     the 3,000, with the WARN saying may_resend=3001 (TestAckLogDamage).
//   - IDs never go back: the ids file keeps a high-water mark that survives
//     losing any segment, so an emptied, cut, quarantined or deleted newest
//     segment does not make IDs restart (Stats.IDGap counts the IDs skipped;
//     TestEmptiedNewestSegment). See ids.go for why an unclean stop skips up
//     to 2^20 IDs.
//
// # Full disk and unusable directories
//
// Open needs no free space: it only reads, truncates, renames and removes,
// and overwrites the ids file in place (if the file is missing and cannot
// be created, appends retry later). On a full file system it opens an
// intact spool and serves it (Next, Peek, Ack); an Append that does not fit
// fails with ErrNoSpace (also errors.Is syscall.ENOSPC) and stores nothing,
// and the spool is not failed: appends work again once space is free, for
// example after acks delete a segment (TestOpenOnFullDisk,
// TestDiskFillsWhileOpen, on tmpfs mounts). Acks that cannot be written
// then are logged (at most every 10 s) and cost duplicates after a restart.
// A directory that cannot be used at all (not creatable, a directory where
// a file should be, a read-only mount, in use, an unknown version) makes
// Open return an *OpenError (TestOpenErrors).
//
// # Bounds and overflow policy
//
// Options.MaxBytes bounds the topic+payload bytes of live (unacked) records.
// When an Append would exceed it, the OLDEST live records are dropped until
// the new one fits (Stats.Dropped[DropSpoolFull]): at the edge the newest
// sensor data is the most valuable. A message larger than MaxBytes on its own
// is rejected with ErrTooLarge. Dropped records are written to acks.log like
// acks, so they do not come back after a restart.
//
// Disk usage also includes acked records sharing a segment with live ones.
// Those "pinned" bytes in sealed segments are bounded too: above
// max(MaxBytes/2, 2*SegmentSize) the oldest live records are dropped (same
// reason) until their segment can be deleted. Memory is 4 bytes plus one bit
// per record on disk, plus one segment struct per file, plus the records
// waiting for their commit write (SyncBatch, SyncAlways: one window's, at
// most one segment, TestPendingBoundedBySegment), plus one read-ahead
// block of 32 KiB; payloads are read back from disk (usually the page
// cache) by Next and Peek; the last commit's window usually comes from
// the block, filled by its write (TestCommittedWindowReadFromMemory).
//
// # Files
//
//	spool.go         ID, Message, Options, Stats, the Spool; Open, Close
//	append.go        Append, AppendAsync: a record written, room made for
//	                 it (the overflow policy), segments started and sealed
//	pending.go       records waiting for their commit write
//	flush.go         the group commit: fsyncs, acks.log, checkpoints
//	covered.go       a commit the upstream acknowledged before its fsync
//	remove.go        Ack and Drop: a record removed, a segment deleted
//	read.go          Next, Peek, Get: live records read back, the read-ahead
//	                 block
//	lanes.go         lanes by priority: Head, HeadSkipping, LastID
//	ledger.go        acks.log's ranges and tallies: the Ledger
//	recover.go       Open's recovery of segments, damage and gaps
//	segment.go       one segment: its records and removed bits, its reader
//	format.go        the on-disk formats of records, segments and acks.log
//	ids.go           the ids file: the ID high-water mark, the clean stop
//	session.go       the spool as the session engine's store: its QoS 2
//	                 flows; sessionlog.go, their log's format
//	errors.go        the errors: ErrNoSpace, ErrTooLarge, OpenError...
package spool
