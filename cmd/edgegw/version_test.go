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
	bin := buildVersioned(t, "c9a16ce", "c9a16ce")
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

// TestBuildVersion builds the binary the way the Makefile does and checks
// that -ldflags reach `edgegw version`.
func TestBuildVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildVersioned(t, "1.2.3", "abc1234")
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "edgegw 1.2.3 commit abc1234 go") {
		t.Errorf("version = %q", out)
	}
	cmd := exec.Command(bin, "check-config", "--config", "does-not-exist.yaml")
	if err := cmd.Run(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Errorf("check-config on a missing file: %v", err)
	}
}

// buildVersioned builds the binary as the Makefile does (CGO off), with
// version and commit set by -ldflags, and returns its path.
func buildVersioned(t *testing.T, version, commit string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "edgegw")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin,
		"-ldflags", "-X main.version="+version+" -X main.commit="+commit, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
