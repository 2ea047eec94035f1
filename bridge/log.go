package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// pahoLogger adapts paho's Logger interface (Println/Printf) to slog at a
// fixed level, through the logger in pahoLog (discarded until set).
type pahoLogger struct {
	level slog.Level
}

// pahoLog is the logger paho's messages go to: the first bridge's.
var pahoLog atomic.Pointer[slog.Logger]

func (l pahoLogger) logger() *slog.Logger {
	if lg := pahoLog.Load(); lg != nil && lg.Enabled(context.Background(), l.level) {
		return lg
	}
	return nil
}

func (l pahoLogger) Println(v ...any) {
	if lg := l.logger(); lg != nil {
		lg.Log(context.Background(), l.level, strings.TrimSpace(fmt.Sprintln(v...)))
	}
}

func (l pahoLogger) Printf(format string, v ...any) {
	if lg := l.logger(); lg != nil {
		lg.Log(context.Background(), l.level, fmt.Sprintf(format, v...))
	}
}

// paho.mqtt.golang logs only through its package globals (mqtt.ERROR,
// CRITICAL, WARN, DEBUG), shared by every client in the process. They are
// the one global this package touches, and it sets them here, before any
// client can exist (setting them later races with running clients); the
// logger behind them is swapped atomically by setPahoLogger. paho reports
// every expected network failure as ERROR, so its levels are shifted down
// by one: the bridge logs the state changes that matter itself.
func init() {
	mqtt.CRITICAL = pahoLogger{slog.LevelError}
	mqtt.ERROR = pahoLogger{slog.LevelWarn}
	mqtt.WARN = pahoLogger{slog.LevelInfo}
	mqtt.DEBUG = pahoLogger{slog.LevelDebug - 4}
}

// setPahoLogger routes paho's logging to log, if no bridge did already.
func setPahoLogger(log *slog.Logger) {
	pahoLog.CompareAndSwap(nil, log.With("component", "paho"))
}

// connectFailed counts and logs a failed connection attempt to u.
func (b *Bridge) connectFailed(u *url.URL, err error) {
	b.connectFailures.Add(1)
	b.setState(Disconnected, u.Redacted(), err)
	b.log.Info("uplink connect failed", "address", u.Redacted(), "err", err)
}
