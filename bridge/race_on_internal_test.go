//go:build race

package bridge

// raceBuild: the race detector is on; its instrumentation of the
// flusher's socket write allocates (alloc_internal_test.go).
const raceBuild = true
