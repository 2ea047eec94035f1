package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// pahoLogger adapts paho's Logger interface (Println/Printf) to slog at a
// fixed level.
type pahoLogger struct {
	log   *slog.Logger
	level slog.Level
}

func (l pahoLogger) Println(v ...any) {
	if l.log.Enabled(context.Background(), l.level) {
		l.log.Log(context.Background(), l.level, strings.TrimSpace(fmt.Sprintln(v...)))
	}
}

func (l pahoLogger) Printf(format string, v ...any) {
	if l.log.Enabled(context.Background(), l.level) {
		l.log.Log(context.Background(), l.level, fmt.Sprintf(format, v...))
	}
}

var pahoLogOnce sync.Once

// setPahoLogger routes paho's logging into slog. paho.mqtt.golang logs only
// through its package globals (mqtt.ERROR, CRITICAL, WARN, DEBUG), shared by
// every client in the process; this is the one place that sets them, once,
// with the logger of the first bridge created. paho reports every expected
// network failure as ERROR, so its levels are shifted down by one: the
// bridge logs the state changes that matter itself.
func setPahoLogger(log *slog.Logger) {
	pahoLogOnce.Do(func() {
		l := log.With("component", "paho")
		mqtt.CRITICAL = pahoLogger{l, slog.LevelError}
		mqtt.ERROR = pahoLogger{l, slog.LevelWarn}
		mqtt.WARN = pahoLogger{l, slog.LevelInfo}
		mqtt.DEBUG = pahoLogger{l, slog.LevelDebug - 4}
	})
}
