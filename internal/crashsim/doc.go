// Package crashsim explores the disk states a power cut could leave
// behind a log, in the spirit of ALICE (Pillai et al., OSDI 2014) and
// CrashMonkey (Mohan et al., OSDI 2018): a workload runs on a real
// directory through a Recorder (a durable.FS), which records every
// creation, write, truncation, fsync, rename, removal and directory fsync
// in the order they happened. From that trace, States builds the states a
// cut at any moment could leave, across all the files at once:
//
//   - everything fsynced before the cut is there: a file's writes and
//     truncations before an fsync of that file, a directory's creations,
//     renames and removals before an fsync of the directory;
//   - of what was not fsynced, any subset of the writes and truncations
//     (the page cache writes back in any order; a subset applied in trace
//     order is also every reordering between barriers), and of the
//     directory operations a prefix (file systems journal metadata in
//     order: ext4, f2fs, xfs), so a creation or rename without its
//     directory fsync can be lost, and a removal undone;
//   - one write torn: cut at a 512-byte sector boundary, or kept at its
//     length with zeros from that boundary on (the size reached the disk,
//     the data did not).
//
// The space is large, so it is bounded: for each crash point the states
// most likely to break a log come first (only what was fsynced; all of
// it, as kill -9 leaves it; each prefix of the unsynced writes, in time
// order, with its last write torn; all but one), then a seeded sample of
// subsets. The log's real recovery then opens each state, and the test
// checks it against what its workload recorded as acknowledged (Mark).
package crashsim
