//go:build unix

package spool

import (
	"errors"
	"os"
	"syscall"
)

// lockDir opens path and takes an exclusive flock on it, so that two
// processes never append to the same spool. Closing the file releases it;
// so does the kernel when the process dies.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, err
	}
	return f, nil
}
