package auth

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

func quickPasswordFile(t *testing.T, users map[string]string) string {
	t.Helper()
	var b []byte
	for u, pw := range users {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, u+":"+string(h)+"\n"...)
	}
	path := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVerifyCache: a client reconnecting with the password it used a
// moment ago is not verified by bcrypt again; a wrong password always is;
// a reload forgets what was remembered.
func TestVerifyCache(t *testing.T) {
	f := &Files{PasswordFile: quickPasswordFile(t, map[string]string{"alice": "right"})}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	auth := func(pw string) error { return f.Authenticate("c", "alice", []byte(pw), true, "") }
	if err := auth("right"); err != nil {
		t.Fatal(err)
	}
	if err := auth("right"); err != nil {
		t.Fatal(err)
	}
	if n := f.ver.bcrypts.Load(); n != 1 {
		t.Fatalf("%d bcrypt comparisons for two logins with the same password, want 1", n)
	}
	for range 3 {
		if err := auth("wrong"); err != ErrBadCredentials {
			t.Fatalf("wrong password: %v", err)
		}
	}
	if n := f.ver.bcrypts.Load(); n != 4 {
		t.Fatalf("%d bcrypt comparisons, want 4 (wrong passwords are never cached)", n)
	}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	if err := auth("right"); err != nil {
		t.Fatal(err)
	}
	if n := f.ver.bcrypts.Load(); n != 5 {
		t.Fatalf("%d bcrypt comparisons after a reload, want 5", n)
	}
}

// TestVerifySlotsBound: however many connections check passwords at once,
// at most verifySlots bcrypt comparisons run together.
func TestVerifySlotsBound(t *testing.T) {
	f := &Files{PasswordFile: quickPasswordFile(t, map[string]string{"alice": "right"})}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := "alice"
			if i%2 == 0 {
				user = "nobody"
			}
			f.Authenticate("c", user, []byte("wrong"), true, "")
		}()
	}
	wg.Wait()
	if n := f.ver.bcrypts.Load(); n != 32 {
		t.Fatalf("%d comparisons, want 32", n)
	}
	if p := f.ver.peak.Load(); int(p) > verifySlots() {
		t.Fatalf("%d comparisons ran at once, want at most %d", p, verifySlots())
	}
}
