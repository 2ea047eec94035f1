package gateway

import "time"

// The tarpit's schedule, for gateway_test's bound on how many guesses a
// flood gets checked (tarpit_test.go).
const (
	TarpitFreeParallel = tarpitFreeParallel
	TarpitBase         = tarpitBase
)

// Penalty is the wait after fails failures.
func Penalty(fails int) time.Duration { return penalty(fails) }
