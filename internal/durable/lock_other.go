//go:build !unix

package durable

import "os"

// lockFile opens path; there is no advisory lock on this platform.
func lockFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}
