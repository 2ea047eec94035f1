package serialport

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newPty returns a pollable pty master (with deadlines) and the slave path.
// The slave stays open until cleanup so that the master never reads EIO
// while the device under test is between opens; closeSlave closes it early.
func newPty(t *testing.T) (master *os.File, slavePath string, closeSlave func()) {
	t.Helper()
	m, s := testutil.Pty(t)
	return m, s.Name(), func() { s.Close() }
}

func readN(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	if d, ok := r.(interface{ SetReadDeadline(time.Time) error }); ok {
		d.SetReadDeadline(time.Now().Add(5 * time.Second))
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

func TestOpenPty(t *testing.T) {
	master, path, _ := newPty(t)
	p, err := Open(Config{Path: path})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer p.Close()
	if p.Name() != path {
		t.Fatalf("Name = %q", p.Name())
	}

	// Raw mode: bytes pass unchanged both ways (no echo, no CR/LF mapping).
	data := []byte{0x00, 0x0A, 0x0D, 0x03, 0x04, 0x11, 0x13, 0xFF, 0x7F}
	if _, err := p.Write(data); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, master, len(data)); !bytes.Equal(got, data) {
		t.Fatalf("master read %x, want %x", got, data)
	}
	if _, err := master.Write(data); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, p, len(data)); !bytes.Equal(got, data) {
		t.Fatalf("port read %x, want %x", got, data)
	}

	// Deadlines work.
	p.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := p.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read after deadline: %v", err)
	}
	p.SetReadDeadline(time.Time{})

	// Close unblocks a pending Read.
	errc := make(chan error, 1)
	go func() {
		_, err := p.Read(make([]byte, 1))
		errc <- err
	}()
	// Whether Close comes before or during the Read, the Read must end.
	p.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrClosed) {
			t.Fatalf("Read after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Read")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestOpenReadTimeout(t *testing.T) {
	_, path, _ := newPty(t)
	p, err := Open(Config{Path: path, ReadTimeout: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	if _, err := p.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("ReadTimeout took %v", el)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "file")
	os.WriteFile(regular, nil, 0o600)
	for name, path := range map[string]string{
		"missing":     filepath.Join(dir, "ttyNONE"),
		"not a tty":   regular,
		"empty path":  "",
		"a directory": dir,
	} {
		t.Run(name, func(t *testing.T) {
			if p, err := Open(Config{Path: path}); err == nil {
				p.Close()
				t.Fatalf("Open(%q) succeeded", path)
			}
		})
	}
	if _, err := Open(Config{Path: filepath.Join(dir, "x")}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing device error %v does not wrap os.ErrNotExist", err)
	}
}
