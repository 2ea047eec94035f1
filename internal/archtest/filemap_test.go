package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goFileName is a Go file named in prose: a bare name, not a path into
// another package (internal/sockio/raw.go) and not part of a longer word.
var goFileName = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])([A-Za-z0-9_]+\.go)\b`)

// filesSection returns the lines of the "# Files" section of a package
// comment (as ast.CommentGroup.Text gives it): from the heading to the
// next heading or the end. ok is false when there is no such section.
func filesSection(doc string) (section string, ok bool) {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "# ") {
			if ok {
				break
			}
			ok = line == "# Files"
			continue
		}
		if ok {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String(), ok
}

// checkFileMap compares a "# Files" section with a package's non-test Go
// files (doc.go, which holds the map, aside): missing are the files it
// does not name, stale the names it gives that are no file. A file counts
// as named wherever the section mentions it, on its own line or in
// another's ("persist.go  writing the state store; restore.go reading it
// back").
func checkFileMap(section string, files []string) (missing, stale []string) {
	named := map[string]bool{}
	for _, m := range goFileName.FindAllStringSubmatch(section, -1) {
		named[m[1]] = true
	}
	for _, f := range files {
		if f != "doc.go" && !named[f] {
			missing = append(missing, f)
		}
	}
	for n := range named {
		if !slices.Contains(files, n) {
			stale = append(stale, n)
		}
	}
	slices.Sort(stale)
	return missing, stale
}

// TestFileMapsExact: a package whose doc.go has a "# Files" section keeps
// there the map of its source files, and the map is exact: every non-test
// .go file of the package is named in it, and every .go file it names
// exists. A file left out is code a reader is not told about; a stale
// name sends them to a file that is gone. (Build-constrained files count:
// the map is of the directory, whatever the platform.)
func TestFileMapsExact(t *testing.T) {
	_, root := modulePackages(t)
	maps := 0
	err := walkModule(root, false, func(path string) error {
		if filepath.Base(path) != "doc.go" {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if f.Doc == nil {
			return nil
		}
		section, ok := filesSection(f.Doc.Text())
		if !ok {
			return nil
		}
		maps++
		dir := filepath.Dir(path)
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		var files []string
		for _, e := range entries {
			if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
				files = append(files, n)
			}
		}
		rel, _ := filepath.Rel(root, path)
		missing, stale := checkFileMap(section, files)
		for _, m := range missing {
			t.Errorf("%s: the # Files map does not name %s", rel, m)
		}
		for _, s := range stale {
			t.Errorf("%s: the # Files map names %s, which is not a file of the package", rel, s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if maps < 2 {
		t.Fatalf("found %d file maps under %s: the walk missed the module (gateway and bridge have one)", maps, root)
	}
}

// TestFileMapCheckCatches: the check finds a file left out and a name that
// is no file, and counts a file named inside another's line; a path into
// another package and a word that only ends in .go are not names.
func TestFileMapCheckCatches(t *testing.T) {
	doc := strings.Join([]string{
		"Package x does things.",
		"",
		"# Files",
		"",
		"\tserver.go    the server; restore.go reading it back",
		"\tgone.go      a file that was removed",
		"\treader.go    reads through internal/sockio/raw.go (not.gopher)",
		"",
		"# Lock order",
		"",
		"\tlater.go     past the section: not part of the map",
	}, "\n")
	section, ok := filesSection(doc)
	if !ok {
		t.Fatal("no # Files section found")
	}
	missing, stale := checkFileMap(section, []string{"doc.go", "reader.go", "restore.go", "server.go", "writer.go", "later.go"})
	if want := []string{"writer.go", "later.go"}; !slices.Equal(missing, want) {
		t.Errorf("missing = %q, want %q", missing, want)
	}
	if want := []string{"gone.go"}; !slices.Equal(stale, want) {
		t.Errorf("stale = %q, want %q", stale, want)
	}
	if _, ok := filesSection("Package y.\n\n# Design\n\n\tx.go\n"); ok {
		t.Error("a comment without # Files has no map")
	}
}
