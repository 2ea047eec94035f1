package spool

import (
	"errors"
	"fmt"
	"io/fs"
)

var (
	// ErrClosed is returned by methods called after Close.
	ErrClosed = errors.New("spool: closed")
	// ErrTooLarge is returned by Append for a message that can never fit.
	ErrTooLarge = errors.New("spool: message too large")
	// ErrNoSpace is returned by Append (and reported to AppendAsync's done)
	// when the file system has no room for the record. Nothing was stored
	// and the spool is not failed: it keeps serving what it holds, and a
	// later Append succeeds once space is free again (acks free segments).
	// The error also matches syscall.ENOSPC or EDQUOT with errors.Is.
	ErrNoSpace = errors.New("spool: no space left on device")
	// ErrLocked is wrapped by the *OpenError of an Open that found the
	// directory in use by another spool (another process, or this one).
	ErrLocked = errors.New("spool: in use by another spool")
	// ErrUnknownVersion is wrapped by the *OpenError of an Open that found
	// a file whose header names a format version this build cannot read
	// (written by a newer edgegw, or a damaged version byte; the two cannot
	// be told apart, so Open refuses rather than guess and touches nothing).
	ErrUnknownVersion = errors.New("spool: unknown format version")
)

// OpenError is the error Open returns when the spool cannot be used at
// all: the directory cannot be created or locked, a path where a file
// should be is a directory, a file cannot be read (permission, I/O error),
// the file system is read-only, or a header names an unknown version.
// Damage inside the files is not an OpenError: Open repairs what it can,
// counts it in Stats and succeeds. A full disk is not one either.
//
// The caller should report it (the spool's owner cannot run) and keep
// everything else running; errors.Is(err, ErrLocked) and
// errors.Is(err, ErrUnknownVersion) single out the two cases that are
// not a storage problem.
type OpenError struct {
	Dir  string // Options.Dir
	Op   string // the step that failed, e.g. "lock", "read acks.log"
	Path string // the file concerned, if any
	Err  error
}

func (e *OpenError) Error() string {
	var pe *fs.PathError
	if e.Path != "" && !(errors.As(e.Err, &pe) && pe.Path == e.Path) {
		return fmt.Sprintf("spool %s: %s %s: %v", e.Dir, e.Op, e.Path, e.Err)
	}
	return fmt.Sprintf("spool %s: %s: %v", e.Dir, e.Op, e.Err)
}

func (e *OpenError) Unwrap() error { return e.Err }
