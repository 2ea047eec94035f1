package main

// The process logger. Under systemd, stderr is a stream to the journal,
// which stamps every line itself and takes its priority from an sd-daemon
// prefix ("<3>" = err, ..., "<7>" = debug; see sd-daemon(3)): there the
// logger leaves out time= and starts each line with the prefix, so that
// `journalctl -p warning` filters. Everywhere else lines are plain slog.

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"

	"github.com/edgegw/edgegw/internal/config"
)

// Syslog priorities the journal understands (sd-daemon.h).
const (
	prioErr     = 3
	prioWarning = 4
	prioInfo    = 6
	prioDebug   = 7
)

// underJournal reports whether w is the stream systemd connected to the
// journal: $JOURNAL_STREAM holds "device:inode" of that stream
// (systemd.exec(5)); a child whose stderr was redirected elsewhere has the
// variable but another file, and must not use the prefix.
func underJournal(w io.Writer, getenv func(string) string) bool {
	f, ok := w.(*os.File)
	js := getenv("JOURNAL_STREAM")
	if !ok || js == "" {
		return false
	}
	var dev, ino uint64
	if _, err := fmt.Sscanf(js, "%d:%d", &dev, &ino); err != nil {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return uint64(st.Dev) == dev && uint64(st.Ino) == ino //nolint:unconvert // Dev and Ino differ in type across GOARCH
}

// newLogger builds the process logger from the log section (to w, which is
// stderr: the journal under systemd). The config is validated, so unknown
// values do not occur; they fall back to info/text.
func newLogger(c config.Log, w io.Writer) *slog.Logger {
	return newLeveledLogger(c, w, new(slog.LevelVar), false)
}

// parseLevel maps log.level to a slog level (validated config: unknown is info).
func parseLevel(s string) slog.Level {
	switch s {
	case config.LevelDebug:
		return slog.LevelDebug
	case config.LevelWarn:
		return slog.LevelWarn
	case config.LevelError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// newLeveledLogger is newLogger with the level in lv, so SIGHUP can change
// it, and journal set when w is the journal (see underJournal).
func newLeveledLogger(c config.Log, w io.Writer, lv *slog.LevelVar, journal bool) *slog.Logger {
	lv.Set(parseLevel(c.Level))
	opts := &slog.HandlerOptions{Level: lv}
	if journal {
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{} // the journal has the time
			}
			return a
		}
		w = &priorityWriter{w: w}
	}
	if c.Format == config.FormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// priorityWriter puts the sd-daemon priority prefix in front of each line
// written by a slog handler without time: the line starts with the level
// (`level=WARN ...` or `{"level":"WARN",...`). slog writes a record with
// one Write call, serialized by the handler.
type priorityWriter struct{ w io.Writer }

func (p *priorityWriter) Write(line []byte) (int, error) {
	rest := line
	for _, lead := range [][]byte{[]byte("level="), []byte(`{"level":"`)} {
		if bytes.HasPrefix(line, lead) {
			rest = line[len(lead):]
			break
		}
	}
	prio := prioInfo
	switch {
	case bytes.HasPrefix(rest, []byte("ERROR")):
		prio = prioErr
	case bytes.HasPrefix(rest, []byte("WARN")):
		prio = prioWarning
	case bytes.HasPrefix(rest, []byte("DEBUG")):
		prio = prioDebug
	}
	buf := make([]byte, 0, len(line)+3)
	buf = fmt.Appendf(buf, "<%d>", prio)
	buf = append(buf, line...)
	if _, err := p.w.Write(buf); err != nil {
		return 0, err
	}
	return len(line), nil
}

// problemWriter prints the plain lines of config problems and warnings
// (check-config, and run before its logger exists) with the journal's
// priority prefix when journal is set.
type problemWriter struct {
	w       io.Writer
	journal bool
}

func (p problemWriter) line(prio int, format string, a ...any) {
	if p.journal {
		fmt.Fprintf(p.w, "<%d>", prio)
	}
	fmt.Fprintf(p.w, format+"\n", a...)
}
