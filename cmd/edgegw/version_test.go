package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionLine: a build whose version is its commit (git describe
// without a tag) shows the hash once; a tagged build shows both.
func TestVersionLine(t *testing.T) {
	for _, c := range []struct{ version, commit, want string }{
		{"c9a16ce", "c9a16ce", "c9a16ce"},
		{"c9a16ce-dirty", "c9a16ce", "c9a16ce-dirty"},
		{"c9a16ce", "c9a16ce04f1e", "c9a16ce"}, // go build's 12-digit revision
		{"c9a16ce-dirty", "c9a16ce04f1e-dirty", "c9a16ce-dirty"},
		{"v1.2.3-5-gc9a16ce", "c9a16ce", "v1.2.3-5-gc9a16ce"}, // describe names the commit
		{"v1.2.3-5-gc9a16ce-dirty", "c9a16ce", "v1.2.3-5-gc9a16ce-dirty"},
		{"v1.2.3", "c9a16ce", "v1.2.3 (c9a16ce)"},
		{"1.2.3", "abc1234", "1.2.3 (abc1234)"},
		{"c9a16ce", "d00dfee", "c9a16ce (d00dfee)"}, // another commit's hash: both
		{"dead", "beef1234", "dead (beef1234)"},
		{"dev", "unknown", "dev"},
		{"dev", "c9a16ce", "dev (c9a16ce)"},
		{"v1.2.3-5-gzz", "c9a16ce", "v1.2.3-5-gzz (c9a16ce)"},
	} {
		if got := versionLine(c.version, c.commit); got != c.want {
			t.Errorf("versionLine(%q, %q) = %q, want %q", c.version, c.commit, got, c.want)
		}
	}
}

// TestVersionCommandHashOnce builds the binary as `make build` does from
// a commit without a tag (version and commit both the short hash) and
// checks that `edgegw version` and the help's header name it once.
func TestVersionCommandHashOnce(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	bin := filepath.Join(t.TempDir(), "edgegw")
	build := exec.Command(goBin, "build", "-o", bin, "-ldflags", "-X main.version=c9a16ce -X main.commit=c9a16ce", ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "edgegw c9a16ce " + runtime.Version() + " "
	if !strings.HasPrefix(string(out), want) || strings.Count(string(out), "c9a16ce") != 1 {
		t.Errorf("version = %q, want it to start %q and name the hash once", out, want)
	}
	help, err := exec.Command(bin, "--help").Output()
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(string(help), "\n"); first != "edgegw c9a16ce: MQTT edge gateway" {
		t.Errorf("help header = %q", first)
	}
}
