package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestBinaryPasswdOnTerminal: on a terminal, edgegw passwd asks for the
// password twice without echoing it (docs/install.md), creates a missing
// file with mode 0640 (its help), and refuses two different entries,
// leaving the file as it was.
func TestBinaryPasswdOnTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	file := filepath.Join(t.TempDir(), "passwd")
	run := func(first, second string) (string, error) {
		t.Helper()
		cmd := exec.Command(bin, "passwd", file, "alice")
		tty, err := pty.Start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		defer tty.Close()
		var out lockedBuffer // what it wrote to its terminal
		go func() { _, _ = tty.WriteTo(&out) }()
		testutil.Eventually(t, 10*time.Second, "the first prompt", func() bool { return strings.Contains(out.String(), "password for alice: ") })
		tty.WriteString(first + "\n")
		testutil.Eventually(t, 10*time.Second, "the second prompt", func() bool { return strings.Contains(out.String(), "again: ") })
		tty.WriteString(second + "\n")
		err = cmd.Wait()
		return out.String(), err
	}

	out, err := run("tty-s3cret", "tty-s3cret")
	if err != nil {
		t.Fatalf("passwd on a terminal: %v\n%s", err, out)
	}
	if strings.Contains(out, "tty-s3cret") {
		t.Fatalf("the password was echoed:\n%s", out)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o640 {
		t.Errorf("new password file mode %o, want 640", st.Mode().Perm())
	}
	before, _ := os.ReadFile(file)
	if !strings.HasPrefix(string(before), "alice:$2") {
		t.Fatalf("password file = %q", before)
	}

	out, err = run("one", "two")
	if err == nil || !strings.Contains(out, "passwords do not match") {
		t.Fatalf("two different entries: %v\n%s", err, out)
	}
	if after, _ := os.ReadFile(file); !bytes.Equal(after, before) {
		t.Fatal("a refused entry changed the file")
	}
}
