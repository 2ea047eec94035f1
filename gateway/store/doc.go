// Package store keeps the broker's durable state: retained messages and
// persistent sessions (subscriptions with their options, queued and
// in-flight QoS 1/2 messages, inbound QoS 2 packet ids awaiting PUBREL,
// a bridge's inbound QoS 2 packet ids with the routing of their messages,
// delayed wills and expiry deadlines) across restarts, kill -9 and power
// loss. The gateway writes to it through small hooks (gateway/persist.go)
// and restores from the State that Open returns. It imports only the
// standard library.
//
// # On disk
//
// The directory (<persistence.dir>/state) holds:
//
//	LOCK                         flock(2)ed while a process has the store open
//	state.log                    the log
//	state.log.tmp                a snapshot being written; deleted at Open
//	state.reserve                64 KiB of zeros: room held back for a snapshot on a full disk
//	state.reserve.tmp            the reserve being written; renamed when whole
//	state.log.corrupt-<unix ns>  a damaged or unreadable log, kept for inspection
//
// state.log starts with an 8-byte header
//
//	"EGST" | version (1 byte, =2) | 3 reserved bytes
//
// Version 2 added record kinds 13 and 14 to version 1's. A version 1 file
// is read as it is and rewritten under the version 2 header at Open (a
// version 1 binary would take kinds 13 and 14 for damage).
//
// followed by records, all integers little endian:
//
//	length uint32 | crc32c(body) uint32 | body
//	body = kind uint8 | fields
//
// Kinds: 1 retained set (message), 2 retained cleared (topic), 3 session
// put (client, expiry ns, disconnected-at unix ns, will-due unix ns, will
// flag, will message, owner user name; the owner was added at the end
// after version 1 shipped: a record without it decodes with the owner
// unknown, and an older binary counts a record with it as undecodable),
// 4 session deleted (client: everything it held goes),
// 5 subscription put (client, filter, QoS, flags, subscription id), 6
// subscription deleted, 7 queued message (client, sequence number, granted
// QoS, flags, packet id, subscription ids, message), 8 queued message
// removed (acknowledged, dropped, expired), 9 QoS 2 message sent with a
// packet id, 10 QoS 2 message released (PUBREC: its payload is dropped),
// 11 inbound QoS 2 packet id, 12 inbound id released, 13 group (origin,
// packet id, count, then count records, each a uint32 length and a body
// as above without CRC: an origin's inbound QoS 2 packet id written with
// the records that routed its message, so both are read back or neither;
// packet id 0 = records only; see group.go), 14 origin id released
// (origin, packet id; 0 = all of the origin's). A message is: topic,
// flags (QoS, retain), expiry (unix ns), origin, v5 properties (opaque),
// payload. Strings have a uint16 length, byte strings a uint32 one.
//
// Every change is one record appended to the log; replaying the log gives
// the live state. The log is replaced by a snapshot of the live state
// (written to state.log.tmp, fsynced, renamed, directory fsynced; always,
// whatever the sync mode) when it has grown to CompactRatio (4) times the
// live state and at least CompactMin (1 MiB); at Open when it was new,
// damaged or torn, or already that large; at Close when it
// holds dead records (so a cleaned or expired session leaves no byte on
// disk after a clean stop). Each live byte is thus written once as a record
// and at most about 1/(CompactRatio-1) times again in snapshots: bytes
// written stay within 4/3 of the record bytes plus the snapshots at Open
// and Close (amortised; Stats counts both, and fsyncs).
//
// # Damage
//
// A record whose length or CRC does not hold is skipped by searching
// forward, byte by byte, for the next offset where a record with a valid
// length and CRC starts: a flipped byte or a zeroed page costs the records
// it touches, not the rest. A torn tail (a power cut during a write) is
// dropped with a WARN. Damage inside the file is logged at ERROR, the
// original is kept as state.log.corrupt-<unix ns> and the state that could
// be read is written as a fresh snapshot. The header (fixed size) holds
// no record: a damaged one is rewritten in place with a WARN when records
// behind it validate. Only a file in which no record reads is taken as not
// a state log (or, if its header names a higher version, as a newer
// format's): it is moved aside the same way and the broker starts with an
// empty state: Open never fails because of
// the file's content. It fails only when the directory cannot be used
// (created, locked, written); cmd/edgegw then runs the broker with its
// state in memory and logs at ERROR.
//
// # Durability contract
//
// Appending encodes the record into memory under the store's lock (the
// gateway calls it under its session locks; no I/O there). One flusher
// goroutine writes what was appended with one write and, per the sync
// mode, one fsync; WhenDurable(pos, fn) calls fn once every record up to
// pos is kept:
//
//   - SyncAlways: written and fsynced. The flusher starts as soon as
//     someone waits; everyone who appended meanwhile shares that fsync.
//     Survives kill -9 and power loss.
//   - SyncBatch: written and fsynced by the group commit, at most
//     SyncInterval after the first record of the window. Survives kill -9
//     and power loss.
//   - SyncNone: written (in the kernel's page cache) at once, never
//     fsynced except by snapshots and Close. Survives kill -9, not power
//     loss.
//
// The records waiting to be written are bounded (Options.PendingMax
// records, 16,384 by default): when the disk stalls, an append beyond
// the bound waits for the flusher (durable.StallWait, the default) or is
// refused (durable.StallRefuse): its position is Refused, WhenDurable
// reports durable.ErrStalled, and the record is neither applied nor
// written. Records joining an open group are not counted (one message's
// routing; the flusher holds them until the group commits).
//
// Every file operation goes through Options.FS (internal/durable's seam:
// the real file system, or a recorder a crash-state test explores); the
// lock, the sync modes, the group-commit flusher and the snapshot's
// write-fsync-rename are internal/durable's, shared with the bridge's
// spool.
//
// The gateway makes every acknowledgement that promises state wait for it
// (see gateway/persist.go): PUBACK/PUBREC of a QoS 1/2 message queued for
// a persistent session or retained, the upstream PUBACK of a bridged
// message (Server.Publish blocks until kept), PUBREC of an inbound QoS 2
// id, PUBCOMP of its removal, SUBACK. Records nobody waits for (a message
// acknowledged by its subscriber, a QoS 2 packet id sent, connect and
// disconnect times, unsubscribe) are written within one window; a crash in
// that window can bring a delivered message back (delivered again: QoS 1
// is at least once) or resend a QoS 2 message sent in that window under a
// new packet id (delivered again).
//
// A write that fails (a full disk) is cut off again and the waiters get
// the error (the publisher is not acknowledged); the model keeps the
// change and the next flush writes a snapshot. A write that fails with
// ENOSPC tries that snapshot at once. When the log's own records fill the
// disk the snapshot cannot be written beside it; if it fits in
// state.reserve (its 64 KiB less 8 KiB of slack) the reserve is deleted
// and the snapshot written into its room, and the rename frees the dead
// records; the reserve is recreated after that compaction (or retried
// once a minute). The reserve holds no state: a version that does not know
// it ignores it, and its bytes are not in Stats.BytesWritten. A failed
// fsync fails the store for good (the kernel may have dropped the dirty
// pages): every later waiter gets the error.
package store
