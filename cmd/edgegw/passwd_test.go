package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// Tests of edgegw passwd: from a pipe, and on a terminal.

// TestPasswdCommand: edgegw passwd reads the password from a pipe and
// adds or changes a user's bcrypt entry, keeping the file's owner, group
// and mode.
func TestPasswdCommand(t *testing.T) {
	file := filepath.Join(t.TempDir(), "passwd")
	r, w, _ := os.Pipe()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old }()
	w.WriteString("s3cret\n")
	w.Close()
	code, out, errOut := call(t, "passwd", file, "alice")
	if code != 0 {
		t.Fatalf("passwd exit %d: %s %s", code, out, errOut)
	}
	b, _ := os.ReadFile(file)
	if !strings.HasPrefix(string(b), "alice:$2") {
		t.Fatalf("password file = %q", b)
	}
	if code, _, _ := call(t, "passwd", file); code != exitUsage {
		t.Fatalf("passwd with one arg exit %d, want %d", code, exitUsage)
	}

	// Changing a password keeps the file's owner, group and mode (the
	// admin made it readable by the gateway's group). Needs root to chown.
	if os.Geteuid() != 0 {
		t.Fatal("this test runs as root (make test does) to chown the password file")
	}
	if err := os.Chown(file, 4242, 4343); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o604); err != nil {
		t.Fatal(err)
	}
	r2, w2, _ := os.Pipe()
	os.Stdin = r2
	w2.WriteString("n3w\n")
	w2.Close()
	if code, out, errOut := call(t, "passwd", file, "bob"); code != 0 {
		t.Fatalf("passwd bob exit %d: %s %s", code, out, errOut)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != 4242 || sys.Gid != 4343 || st.Mode().Perm() != 0o604 {
		t.Errorf("after passwd: uid %d gid %d mode %o, want 4242 4343 604", sys.Uid, sys.Gid, st.Mode().Perm())
	}
	if b, _ := os.ReadFile(file); !strings.Contains(string(b), "alice:$2") || !strings.Contains(string(b), "bob:$2") {
		t.Errorf("password file = %q", b)
	}
}

// TestBinaryPasswdOnTerminal: on a terminal, edgegw passwd asks for the
// password twice without echoing it (docs/install.md), creates a missing
// file with mode 0640 (its help), and refuses two different entries,
// leaving the file as it was.
func TestBinaryPasswdOnTerminal(t *testing.T) {
	bin := edgegwBinary(t)
	file := filepath.Join(t.TempDir(), "passwd")
	run := func(first, second string) (string, error) {
		t.Helper()
		tty, slave := testutil.Pty(t)
		cmd := exec.Command(bin, "passwd", file, "alice")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true} // the pty is its controlling terminal
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The child's copy of the slave is then the last: the pty ends
		// when the child exits.
		slave.Close()
		var out testutil.LogBuffer // what it wrote to its terminal
		copied := make(chan struct{})
		go func() { // ends at the pty's end: the child exited and its side is closed
			defer close(copied)
			io.Copy(&out, tty)
		}()
		testutil.Eventually(t, 10*time.Second, "the first prompt", func() bool { return strings.Contains(out.String(), "password for alice: ") })
		tty.WriteString(first + "\n")
		testutil.Eventually(t, 10*time.Second, "the second prompt", func() bool { return strings.Contains(out.String(), "again: ") })
		tty.WriteString(second + "\n")
		err := cmd.Wait()
		// What the child wrote last (its error) is in out only once the
		// copy has read to the pty's end.
		select {
		case <-copied:
		case <-time.After(10 * time.Second):
			t.Fatal("the pty did not end after edgegw passwd exited")
		}
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
