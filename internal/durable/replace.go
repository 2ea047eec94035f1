package durable

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
)

// Meter counts what a log costs the flash: bytes written and fsyncs (of
// files and directories). Safe for concurrent use; a nil *Meter counts
// nothing.
type Meter struct {
	bytes, syncs atomic.Int64
}

// Wrote counts n bytes written.
func (m *Meter) Wrote(n int) {
	if m != nil {
		m.bytes.Add(int64(n))
	}
}

// Synced counts one fsync.
func (m *Meter) Synced() {
	if m != nil {
		m.syncs.Add(1)
	}
}

// Bytes is the bytes written so far.
func (m *Meter) Bytes() int64 { return m.bytes.Load() }

// Syncs is the fsyncs done so far.
func (m *Meter) Syncs() int64 { return m.syncs.Load() }

// Replace makes data the content of path, whole or not at all, as far as a
// crash or (with sync) a power cut can tell: it writes data to tmp, fsyncs
// it, renames it over path and fsyncs the directory. Without sync neither
// fsync is done (the log's sync mode said none): a power cut may then
// leave path empty or short, so a log uses that only where its recovery
// reads a damaged file as damage.
//
// It returns the new file, open for reading and writing, positioned after
// data. installed says whether the rename was done: path is data's file
// even if the directory fsync after it failed (err != nil). Before the
// rename, a failure removes tmp and leaves path as it was.
func Replace(fs FS, tmp, path string, data []byte, sync bool, m *Meter) (f File, installed bool, err error) {
	f, err = fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("replace %s: %w", filepath.Base(path), err)
	}
	n, err := f.Write(data)
	m.Wrote(n)
	if err == nil && sync {
		m.Synced()
		err = f.Sync()
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err != nil {
		f.Close()
		fs.Remove(tmp)
		return nil, false, fmt.Errorf("replace %s: %w", filepath.Base(path), err)
	}
	if sync {
		m.Synced()
		if err := fs.SyncDir(filepath.Dir(path)); err != nil {
			return f, true, fmt.Errorf("replace %s: sync directory: %w", filepath.Base(path), err)
		}
	}
	return f, true, nil
}
