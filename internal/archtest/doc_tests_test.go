package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docFiles are the files that make promises about the binary (README,
// docs/, configs/, the unit and the packaging, the runners' READMEs),
// relative to the module root; directories are read one level deep.
var docFiles = []string{
	"README.md", "CONTRIBUTING.md", "docs", "configs", "systemd",
	"packaging/nfpm.yaml", "packaging/scripts",
	"bench/README.md", "soak/README.md", "hostile/README.md",
}

// citedTest is a test, fuzz target or benchmark named in prose.
var citedTest = regexp.MustCompile(`\b(?:Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*`)

// runInPackage is `go test ./PKG -run NAME` (flags in between allowed).
var runInPackage = regexp.MustCompile(`go test (?:-[a-z]+ )*\./([a-z0-9_/]+) (?:-[a-z]+ )*-run '?\^?([A-Za-z0-9_]+)`)

// TestDocsCiteExistingTests: the docs name the test that holds each
// promise ("Each statement about behaviour names the test that holds it",
// docs/security.md). A renamed or deleted test would leave the promise
// pointing at nothing while still reading as covered, so every name cited
// must be a func in a _test.go file of the module, and one cited as `go
// test ./PKG -run NAME` must be in PKG.
func TestDocsCiteExistingTests(t *testing.T) {
	_, root := modulePackages(t)

	// Every Test/Fuzz/Benchmark func of the module, by directory.
	defined := map[string]map[string]bool{} // name -> dirs
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]*)\(`)
	err := walkModule(root, false, func(path string) error {
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for _, m := range decl.FindAllSubmatch(b, -1) {
			name := string(m[1])
			if defined[name] == nil {
				defined[name] = map[string]bool{}
			}
			defined[name][dir] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) < 100 {
		t.Fatalf("found only %d test funcs under %s: the walk is broken", len(defined), root)
	}

	var files []string
	for _, f := range docFiles {
		p := filepath.Join(root, f)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v (update docFiles)", f, err)
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && ext != ".png" && ext != ".go" {
				files = append(files, filepath.Join(p, e.Name()))
			}
		}
	}

	cited := 0
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		for n, line := range strings.Split(string(b), "\n") {
			for _, name := range citedTest.FindAllString(line, -1) {
				cited++
				if defined[name] == nil {
					t.Errorf("%s:%d cites %s, which no _test.go of the module defines", rel, n+1, name)
				}
			}
			for _, m := range runInPackage.FindAllStringSubmatch(line, -1) {
				pkg, name := strings.TrimSuffix(m[1], "/"), m[2]
				if defined[name] != nil && !defined[name][pkg] {
					t.Errorf("%s:%d: go test ./%s -run %s: %s is not in %s", rel, n+1, pkg, name, name, pkg)
				}
			}
		}
	}
	if cited < 50 {
		t.Fatalf("found only %d test names cited in the docs: the scan is broken", cited)
	}
}
