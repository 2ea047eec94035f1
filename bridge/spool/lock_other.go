//go:build !unix

package spool

import "os"

// lockDir opens path; there is no advisory lock on this platform.
func lockDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}
