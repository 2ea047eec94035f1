package gateway

// The tarpit's schedule, for gateway_test's bound on how many guesses a
// flood gets checked (tarpit_test.go).
const (
	TarpitFreeParallel = tarpitFreeParallel
	TarpitBase         = tarpitBase
)
