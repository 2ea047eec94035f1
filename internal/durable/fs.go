package durable

import (
	"errors"
	"io"
	"os"
)

// File is an open file of a log. *os.File implements it.
type File interface {
	io.Reader
	io.Writer
	io.ReaderAt
	io.WriterAt
	Name() string
	Sync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Close() error
}

// FS is the seam between a log and the file system: every file operation
// of the spool and the state store goes through one. Its methods mean
// what the os package's functions of the same name mean; SyncDir fsyncs
// a directory (making creations, renames and removals in it durable) and
// Lock takes the log's exclusive lock.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	ReadFile(name string) ([]byte, error)
	ReadDir(name string) ([]os.DirEntry, error)
	Stat(name string) (os.FileInfo, error)
	Lstat(name string) (os.FileInfo, error)
	MkdirAll(path string, perm os.FileMode) error
	Rename(oldpath, newpath string) error
	Remove(name string) error
	SyncDir(dir string) error
	// Lock opens (creating it) and locks the file at name, exclusively
	// and without waiting: ErrLocked if another process holds it.
	// Closing the file releases the lock; so does the process's death.
	Lock(name string) (File, error)
}

// ErrLocked is Lock's error when another process holds the lock.
var ErrLocked = errors.New("locked by another process")

// OS is the real file system: the os package.
type OS struct{}

// OpenFile is os.OpenFile.
func (OS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return f, nil
}

// ReadFile is os.ReadFile.
func (OS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

// ReadDir is os.ReadDir.
func (OS) ReadDir(name string) ([]os.DirEntry, error) { return os.ReadDir(name) }

// Stat is os.Stat.
func (OS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }

// Lstat is os.Lstat.
func (OS) Lstat(name string) (os.FileInfo, error) { return os.Lstat(name) }

// MkdirAll is os.MkdirAll.
func (OS) MkdirAll(path string, perm os.FileMode) error { return os.MkdirAll(path, perm) }

// Rename is os.Rename.
func (OS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove is os.Remove.
func (OS) Remove(name string) error { return os.Remove(name) }

// SyncDir opens dir and fsyncs it.
func (OS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Lock opens name and takes an exclusive flock(2) on it (lock_unix.go).
func (OS) Lock(name string) (File, error) {
	f, err := lockFile(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Or returns fs, or OS if fs is nil: a log's Options leave the seam nil
// for the real file system.
func Or(fs FS) FS {
	if fs == nil {
		return OS{}
	}
	return fs
}
