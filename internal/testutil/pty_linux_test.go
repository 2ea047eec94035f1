package testutil

import (
	"io"
	"testing"
	"time"
)

// What the slave writes the master reads, within a deadline, and a Close
// of the master ends a Read blocked on it.
func TestPty(t *testing.T) {
	m, s := Pty(t)
	if _, err := s.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	m.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 2)
	if _, err := io.ReadFull(m, got); err != nil || string(got) != "hi" {
		t.Fatalf("master read %q, %v", got, err)
	}
	m.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() { _, err := m.Read(make([]byte, 64)); done <- err }()
	m.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a Read after Close succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a blocked Read")
	}
}
