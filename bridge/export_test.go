package bridge

import "log/slog"

// SetPahoLogForTest routes paho's lines to log until restore is called
// (paho's logger is process-wide and set by the first bridge).
func SetPahoLogForTest(log *slog.Logger) (restore func()) {
	old := pahoLog.Swap(log.With("component", "paho"))
	return func() { pahoLog.Store(old) }
}

// PermanentHint exposes permanentHint to the tests.
var PermanentHint = permanentHint
