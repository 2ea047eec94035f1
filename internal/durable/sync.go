package durable

import "fmt"

// SyncMode says when a log's written records are fsynced (the
// configuration's sync: always, batch or none).
type SyncMode uint8

const (
	// SyncBatch fsyncs once per commit window for everything written in
	// it (group commit). The zero value.
	SyncBatch SyncMode = iota
	// SyncAlways fsyncs as soon as someone waits for a record; those who
	// wait meanwhile share the next fsync.
	SyncAlways
	// SyncNone writes records (they survive kill -9) but leaves it to the
	// operating system when they reach the disk.
	SyncNone
)

// String returns the configuration name of the mode.
func (m SyncMode) String() string {
	switch m {
	case SyncBatch:
		return "batch"
	case SyncAlways:
		return "always"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("SyncMode(%d)", uint8(m))
}

// Valid reports whether m is one of the three modes.
func (m SyncMode) Valid() bool { return m <= SyncNone }

// ParseSyncMode parses "always", "batch" or "none". who names the log in
// the error ("spool", "state store").
func ParseSyncMode(who, s string) (SyncMode, error) {
	for _, m := range []SyncMode{SyncBatch, SyncAlways, SyncNone} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%s: unknown sync mode %q (want always, batch or none)", who, s)
}
