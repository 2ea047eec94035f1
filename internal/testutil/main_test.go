package testutil

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a helper starts ends with the test that started it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
