package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/config"
	"github.com/edgegw/edgegw/internal/testutil"
)

// streamID is "device:inode" of f, as systemd puts in $JOURNAL_STREAM.
func streamID(t *testing.T, f *os.File) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

func TestUnderJournal(t *testing.T) {
	dir := t.TempDir()
	a, err := os.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.Create(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "JOURNAL_STREAM" {
				return v
			}
			return ""
		}
	}
	id := streamID(t, a)
	for _, tc := range []struct {
		name string
		w    any
		env  string
		want bool
	}{
		{"the journal's stream", a, id, true},
		{"stderr redirected elsewhere", b, id, false},
		{"no JOURNAL_STREAM", a, "", false},
		{"garbage", a, "x:y", false},
		{"not a file", &bytes.Buffer{}, id, false},
	} {
		w, _ := tc.w.(interface{ Write([]byte) (int, error) })
		if got := underJournal(w, env(tc.env)); got != tc.want {
			t.Errorf("%s: underJournal = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// ownTime matches a record's own time attribute (text or JSON), not a
// "time" key inside a group.
var ownTime = regexp.MustCompile(`(^|[> ])time=|^(<\d>)?\{"time":`)

// TestJournalHandlerFormat: under the journal every line starts with its
// sd-daemon priority and has no time= (issue 15, point 9).
func TestJournalHandlerFormat(t *testing.T) {
	for _, format := range []string{config.FormatText, config.FormatJSON} {
		var buf bytes.Buffer
		log := newLeveledLogger(config.Log{Level: "debug", Format: format}, &buf, new(slog.LevelVar), true)
		log.Debug("d", "k", 1)
		log.Info("i")
		log.Warn("w")
		log.Error("e", "err", "boom")
		log.With("client", "c1").WithGroup("g").Warn("grouped", "time", "kept inside a group")
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		want := []string{"<7>", "<6>", "<4>", "<3>", "<4>"}
		if len(lines) != len(want) {
			t.Fatalf("%s: %d lines:\n%s", format, len(lines), buf.String())
		}
		for i, l := range lines {
			if !strings.HasPrefix(l, want[i]) {
				t.Errorf("%s: line %q lacks prefix %s", format, l, want[i])
			}
			if ownTime.MatchString(l) {
				t.Errorf("%s: line %q carries its own time", format, l)
			}
		}
		if format == config.FormatText && lines[3] != `<3>level=ERROR msg=e err=boom` {
			t.Errorf("text line %q", lines[3])
		}
		if format == config.FormatJSON && !strings.HasPrefix(lines[2], `<4>{"level":"WARN","msg":"w"}`) {
			t.Errorf("json line %q", lines[2])
		}
	}
	var buf bytes.Buffer
	newLeveledLogger(config.Log{Level: "info", Format: "text"}, &buf, new(slog.LevelVar), false).Info("plain")
	if s := buf.String(); !strings.HasPrefix(s, "time=") {
		t.Errorf("outside the journal: %q", s)
	}
}

// TestBinaryJournalLifecycle runs the binary the way systemd does (stderr a
// stream named by $JOURNAL_STREAM) through a start, client connects, a
// refused login, a failed reload and SIGTERM, and checks the lines: each
// with the priority of its level, no time=, connects and closes at INFO,
// the signal, the drain and what was dropped (issue 15, points 8 and 9).
func TestBinaryJournalLifecycle(t *testing.T) {
	if _, err := exec.LookPath("mosquitto_pub"); err != nil {
		t.Fatalf("mosquitto_pub not installed (make test installs mosquitto-clients): %v", err)
	}
	dir := t.TempDir()
	passwd := writePasswd(t, filepath.Join(dir, "passwd"), "alice", "right")
	acl := filepath.Join(dir, "acl")
	os.WriteFile(acl, []byte("user alice\ntopic readwrite #\n"), 0o600)
	g := newHarness(t).NoMetrics()
	g.Auth(true, passwd, acl)
	g.Prepare = func(cmd *exec.Cmd, stderr *os.File) {
		cmd.Env = append(os.Environ(), "JOURNAL_STREAM="+streamID(t, stderr))
	}
	g.Start()

	host, port := hostPort(g.Addr)
	pub := func(args ...string) error {
		return exec.Command("mosquitto_pub", append([]string{"-h", host, "-p", port, "-t", "a/b", "-m", "x"}, args...)...).Run()
	}
	if err := pub("-q", "1", "-r", "-i", "ok", "-u", "alice", "-P", "right"); err != nil {
		t.Fatalf("mosquitto_pub: %v", err)
	}
	if err := pub("-i", "bad", "-u", "alice", "-P", "wrong"); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	testutil.Eventually(t, 10*time.Second, "closes", func() bool { return strings.Count(g.Logs(), `msg="client closed"`) >= 2 })

	os.WriteFile(acl, []byte("user alice\ntopic sometimes #\n"), 0o600)
	g.Reload()
	if !strings.Contains(g.Logs(), "reload incomplete") {
		t.Fatal("a reload with a bad ACL file did not say it was incomplete")
	}

	g.Stop()
	text := g.Logs()

	prio := map[string]string{"DEBUG": "<7>", "INFO": "<6>", "WARN": "<4>", "ERROR": "<3>"}
	lineRE := regexp.MustCompile(`^(<\d>)level=(\w+) `)
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		m := lineRE.FindStringSubmatch(l)
		if m == nil || prio[m[2]] != m[1] {
			t.Errorf("line without the priority of its level: %q", l)
		}
		if ownTime.MatchString(l) {
			t.Errorf("line with its own time: %q", l)
		}
	}
	for _, want := range []string{
		`<6>level=INFO msg="client connected" listener=lan remote=`,
		`<6>level=INFO msg="client closed" listener=lan remote=`,
		`err="connect refused: bad user name or password"`,
		`<3>level=ERROR msg="reload: auth files; keeping the previous rules" err="` + acl + `:2:`,
		`<4>level=WARN msg="reload incomplete`,
		`<6>level=INFO msg="signal received; stopping (send it again to exit at once)" signal=terminated`,
		`<6>level=INFO msg="stopping: closing listeners and client connections"` + "\n",
		`<4>level=WARN msg="shutdown: dropped what was held in memory only (set persistence.dir to keep it)" queued_messages=0 queued_bytes=0 sessions=0 retained=1 bridge_spooled=0`,
		`<6>level=INFO msg=stopped`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	if strings.Contains(text, "msg=reloaded") {
		t.Error(`"reloaded" logged although the reload failed`)
	}
	if strings.Contains(text, "bad user name or password: bad user name or password") {
		t.Error("doubled error text")
	}
	// The journal's view with -p warning: what it keeps is exactly the
	// WARN and ERROR lines.
	var kept []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "<3>") || strings.HasPrefix(l, "<4>") {
			kept = append(kept, l)
		}
	}
	if len(kept) != strings.Count(text, "level=WARN")+strings.Count(text, "level=ERROR") || len(kept) < 3 {
		t.Errorf("-p warning would keep %d lines:\n%s", len(kept), strings.Join(kept, "\n"))
	}
}
