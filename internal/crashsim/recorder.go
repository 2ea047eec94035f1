package crashsim

import (
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/edgegw/edgegw/internal/durable"
)

// Kind is the kind of a recorded operation.
type Kind uint8

const (
	// Create gave Name a new, empty file (Inode).
	Create Kind = iota + 1
	// Write wrote Data at Off of Inode.
	Write
	// Truncate set Inode's size to Off.
	Truncate
	// Sync fsynced Inode.
	Sync
	// Rename moved Name's file to To (replacing To's).
	Rename
	// Remove removed Name.
	Remove
	// SyncDir fsynced the directory.
	SyncDir
)

var kindNames = [...]string{Create: "create", Write: "write", Truncate: "truncate", Sync: "fsync",
	Rename: "rename", Remove: "remove", SyncDir: "fsync-dir"}

func (k Kind) String() string { return kindNames[k] }

// dirOp reports whether k changes the directory (ordered among
// themselves, made durable by SyncDir).
func (k Kind) dirOp() bool { return k == Create || k == Rename || k == Remove }

// dataOp reports whether k changes a file's content (made durable by
// Sync of that file).
func (k Kind) dataOp() bool { return k == Write || k == Truncate }

// Op is one recorded operation.
type Op struct {
	Kind  Kind
	Name  string // Create, Rename, Remove: the name in the directory
	To    string // Rename: the new name
	Inode int    // Create, Write, Truncate, Sync
	Off   int64  // Write: offset; Truncate: new size
	Data  []byte // Write
}

// Recorder is a durable.FS that runs every operation on the real file
// system (under Dir) and records those that change it. Operations are
// serialised, so the trace is the order in which they happened. Only
// files directly in Dir are modelled (the logs keep no subdirectories).
type Recorder struct {
	inner durable.FS
	dir   string

	// DropSyncDir and DropSync plant bugs for testing the explorer: the
	// directory fsyncs (or the fsyncs of files whose names match
	// DropSync) are not done, as if the log had forgotten them.
	DropSyncDir bool
	DropSync    func(name string) bool

	mu     sync.Mutex
	ops    []Op
	inodes map[string]int // name -> inode now
	names  map[int]string // inode -> its name when created (for DropSync)
	next   int
}

// NewRecorder records operations on the (empty) directory dir through
// the real file system.
func NewRecorder(dir string) *Recorder {
	return &Recorder{inner: durable.OS{}, dir: filepath.Clean(dir), inodes: map[string]int{}, names: map[int]string{}}
}

// Len is the number of operations recorded so far: a Mark.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Trace returns the operations recorded so far.
func (r *Recorder) Trace() *Trace {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &Trace{Ops: append([]Op(nil), r.ops...)}
}

// rel is name's name in the directory, or "" if it is not directly in it.
func (r *Recorder) rel(name string) string {
	name = filepath.Clean(name)
	if filepath.Dir(name) != r.dir {
		return ""
	}
	return filepath.Base(name)
}

func (r *Recorder) recordLocked(op Op) { r.ops = append(r.ops, op) }

// inodeLocked returns the inode of rel, creating it (and recording the
// creation) if the open created the file.
func (r *Recorder) openedLocked(rel string, existed bool) int {
	if ino, ok := r.inodes[rel]; ok && existed {
		return ino
	}
	r.next++
	ino := r.next
	r.inodes[rel] = ino
	r.names[ino] = rel
	r.recordLocked(Op{Kind: Create, Name: rel, Inode: ino})
	return ino
}

// OpenFile opens name, recording a creation or an O_TRUNC.
func (r *Recorder) OpenFile(name string, flag int, perm os.FileMode) (durable.File, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rel := r.rel(name)
	_, statErr := r.inner.Lstat(name)
	f, err := r.inner.OpenFile(name, flag, perm)
	if err != nil || rel == "" {
		return f, err
	}
	existed := statErr == nil
	ino := r.openedLocked(rel, existed)
	if existed && flag&os.O_TRUNC != 0 && flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		r.recordLocked(Op{Kind: Truncate, Inode: ino, Off: 0})
	}
	return &file{r: r, f: f, ino: ino, appendMode: flag&os.O_APPEND != 0}, nil
}

// Lock opens and locks name (recording its creation).
func (r *Recorder) Lock(name string) (durable.File, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, statErr := r.inner.Lstat(name)
	f, err := r.inner.Lock(name)
	if err != nil {
		return nil, err
	}
	if rel := r.rel(name); rel != "" {
		r.openedLocked(rel, statErr == nil)
	}
	return f, nil
}

// ReadFile is not recorded.
func (r *Recorder) ReadFile(name string) ([]byte, error) { return r.inner.ReadFile(name) }

// ReadDir is not recorded.
func (r *Recorder) ReadDir(name string) ([]os.DirEntry, error) { return r.inner.ReadDir(name) }

// Stat is not recorded.
func (r *Recorder) Stat(name string) (os.FileInfo, error) { return r.inner.Stat(name) }

// Lstat is not recorded.
func (r *Recorder) Lstat(name string) (os.FileInfo, error) { return r.inner.Lstat(name) }

// MkdirAll is not recorded: the directory exists in every state.
func (r *Recorder) MkdirAll(path string, perm os.FileMode) error { return r.inner.MkdirAll(path, perm) }

// Rename renames and records it.
func (r *Recorder) Rename(oldpath, newpath string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.inner.Rename(oldpath, newpath); err != nil {
		return err
	}
	from, to := r.rel(oldpath), r.rel(newpath)
	if from != "" && to != "" {
		r.inodes[to] = r.inodes[from]
		delete(r.inodes, from)
		r.recordLocked(Op{Kind: Rename, Name: from, To: to})
	}
	return nil
}

// Remove removes and records it.
func (r *Recorder) Remove(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.inner.Remove(name); err != nil {
		return err
	}
	if rel := r.rel(name); rel != "" {
		delete(r.inodes, rel)
		r.recordLocked(Op{Kind: Remove, Name: rel})
	}
	return nil
}

// SyncDir fsyncs the directory and records it (unless DropSyncDir).
func (r *Recorder) SyncDir(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.DropSyncDir {
		return nil
	}
	if err := r.inner.SyncDir(dir); err != nil {
		return err
	}
	if filepath.Clean(dir) == r.dir {
		r.recordLocked(Op{Kind: SyncDir})
	}
	return nil
}

// file is an open file whose changes are recorded.
type file struct {
	r          *Recorder
	f          durable.File
	ino        int
	pos        int64
	appendMode bool
}

func (f *file) Name() string               { return f.f.Name() }
func (f *file) Stat() (os.FileInfo, error) { return f.f.Stat() }
func (f *file) Close() error               { return f.f.Close() }

func (f *file) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

func (f *file) Read(p []byte) (int, error) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	n, err := f.f.Read(p)
	f.pos += int64(n)
	return n, err
}

func (f *file) Write(p []byte) (int, error) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	off := f.pos
	if f.appendMode {
		fi, err := f.f.Stat()
		if err != nil {
			return 0, err
		}
		off = fi.Size()
	}
	n, err := f.f.Write(p)
	f.pos = off + int64(n)
	f.recordWriteLocked(p[:n], off)
	return n, err
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	n, err := f.f.WriteAt(p, off)
	f.recordWriteLocked(p[:n], off)
	return n, err
}

func (f *file) recordWriteLocked(p []byte, off int64) {
	if len(p) > 0 {
		f.r.recordLocked(Op{Kind: Write, Inode: f.ino, Off: off, Data: append([]byte(nil), p...)})
	}
}

func (f *file) Truncate(size int64) error {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	if err := f.f.Truncate(size); err != nil {
		return err
	}
	f.r.recordLocked(Op{Kind: Truncate, Inode: f.ino, Off: size})
	return nil
}

func (f *file) Sync() error {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	if drop := f.r.DropSync; drop != nil && drop(f.r.names[f.ino]) {
		return nil
	}
	if err := f.f.Sync(); err != nil {
		return err
	}
	f.r.recordLocked(Op{Kind: Sync, Inode: f.ino})
	return nil
}

var _ io.ReaderAt = (*file)(nil)
var _ durable.FS = (*Recorder)(nil)
