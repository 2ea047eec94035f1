// Package durable is the kit the two durable logs share: the bridge's
// spool (bridge/spool) and the broker's state store (gateway/store). Each
// log keeps its own file format and what its records mean; what they
// have in common lives here, once:
//
//   - FS, the seam every file operation of both logs passes through
//     (open, write, fsync, rename, truncate, remove, directory fsync,
//     the lock). OS is the real one; a crash-state test (crashsim)
//     records a workload's operations through it and builds the disk
//     states a power cut could leave.
//   - Lock, the exclusive lock that keeps a second process off a log's
//     directory.
//   - SyncMode (always, batch, none) and its parser.
//   - Replace, the write-fsync-rename-fsync that swaps a file for a new
//     one whole (a checkpoint, a snapshot).
//   - Flusher, the group-commit goroutine: it sleeps until kicked, holds
//     the commit window open as the mode says, and calls the log's flush.
//   - Bound, a bounded pending set: what is appended but not yet written,
//     so that a stalled disk makes writers wait or be refused (the caller
//     chooses) instead of growing memory without end.
//   - Meter, the bytes written and fsyncs done (flash wear).
package durable
