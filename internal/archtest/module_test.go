package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// modulePath is the module every rule talks about.
const modulePath = "github.com/edgegw/edgegw"

// pkg is what `go list -json` says of one package (build files only: test
// files may import what they like, e.g. listeners' tests run a real gateway).
type pkg struct {
	ImportPath string
	Name       string
	Dir        string
	Standard   bool
	GoFiles    []string
	Imports    []string
	Deps       []string // transitive, sorted
}

var (
	listOnce sync.Once
	listPkgs map[string]*pkg
	listRoot string
	listErr  error
)

// modulePackages runs `go list -deps -json ./...` once at the module root:
// every package of the module and everything they depend on.
func modulePackages(t *testing.T) (map[string]*pkg, string) {
	t.Helper()
	listOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			listErr = err
			return
		}
		listRoot = filepath.Dir(strings.TrimSpace(string(out)))
		cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Name,Dir,Standard,GoFiles,Imports,Deps", "./...")
		cmd.Dir = listRoot
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err = cmd.Output()
		if err != nil {
			listErr = errors.New("go list: " + err.Error() + ": " + stderr.String())
			return
		}
		listPkgs = map[string]*pkg{}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			p := new(pkg)
			if err := dec.Decode(p); err == io.EOF {
				break
			} else if err != nil {
				listErr = err
				return
			}
			listPkgs[p.ImportPath] = p
		}
	})
	if listErr != nil {
		t.Fatal(listErr)
	}
	return listPkgs, listRoot
}

// walkModule calls fn for every file below the module root, passing over
// hidden directories, vendor and, unless withTestdata, testdata.
func walkModule(root string, withTestdata bool, fn func(path string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "vendor" || (name == "testdata" && !withTestdata)) {
				return filepath.SkipDir
			}
			return nil
		}
		return fn(path)
	})
}
