package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgegw/edgegw/gateway/auth"
)

// TestReadCacheBounded: a session that sees many distinct topics keeps at
// most readCacheMax verdicts, and every verdict stays right.
func TestReadCacheBounded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "acl")
	if err := os.WriteFile(p, []byte("topic read a/#\ntopic deny a/1/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := &auth.Files{ACLFile: p}
	if err := files.Load(); err != nil {
		t.Fatal(err)
	}
	s := newSession(nil, "c")
	for i := range 3 * readCacheMax {
		topic := fmt.Sprintf("a/%d/x", i%(readCacheMax+7))
		if got, want := s.mayRead(files, topic), i%(readCacheMax+7) != 1; got != want {
			t.Fatalf("mayRead(%s) = %v, want %v", topic, got, want)
		}
		if n := len(s.reads.m); n > readCacheMax {
			t.Fatalf("cache holds %d verdicts, bound %d", n, readCacheMax)
		}
	}
	if s.mayRead(files, "b/x") {
		t.Fatal("b/x readable")
	}
}
