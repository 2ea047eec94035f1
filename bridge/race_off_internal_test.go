//go:build !race

package bridge

// raceBuild: the race detector is on (see race_on_internal_test.go).
const raceBuild = false
