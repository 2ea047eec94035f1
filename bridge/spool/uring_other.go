//go:build !linux

package spool

import (
	"errors"
	"os"
	"sync/atomic"
)

type uring struct {
	broken bool
	writes atomic.Uint64
}

func newURing() (*uring, error) { return nil, errors.New("io_uring: Linux only") }

func (u *uring) close() {}

func (u *uring) writeAt(f *os.File, b []byte, off int64) (int, error) { return f.WriteAt(b, off) }
