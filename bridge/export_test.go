package bridge

import (
	"log/slog"
	"time"
)

// PermanentHint exposes permanentHint to the tests.
var PermanentHint = permanentHint

// ConnackErr exposes connackErr to the tests.
var ConnackErr = connackErr

// FailLog exposes the connect failure log's rate limit, with the clock in
// the test's hands.
type FailLog struct{ f failLog }

func (l *FailLog) Failed(log *slog.Logger, addr string, err error, now time.Time) {
	l.f.failed(log, addr, err, now)
}
func (l *FailLog) Connected(log *slog.Logger, now time.Time) { l.f.connected(log, now) }

// SetStateForTest changes the bridge's state as its owner would.
func (b *Bridge) SetStateForTest(s State, why error) { b.setState(s, "", why) }

// SpoolWaitersForTest is how many wake-up channels the bridge's spool
// holds for senders (spool WakeOnChange).
func (b *Bridge) SpoolWaitersForTest() int { return b.spool.Load().Stats().Waiters }
