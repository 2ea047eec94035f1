package archtest

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The spec tag convention (CONTRIBUTING.md):
//
//   - [MQTT-x.y.z-n] is a numbered normative statement of MQTT 5.0;
//   - [MQTT-x.y.z-n](3.1.1) one of MQTT 3.1.1 (only in 3.1.1, or numbered
//     differently there);
//   - a section that is not a numbered statement is written without
//     brackets: 5.0 §1.5.5, 3.1.1 §2.2.3;
//   - no placeholders ("?", "*").
//
// specTag is one well-formed tag; every "[MQTT-" in the module must start one.
var specTag = regexp.MustCompile(`^\[MQTT-[0-9]+(\.[0-9]+)*-[0-9]+\](\(3\.1\.1\))?`)

// badSpecTags returns the "[MQTT-" occurrences in line that are not
// well-formed tags.
func badSpecTags(line string) []string {
	var bad []string
	for i := strings.Index(line, "[MQTT-"); i >= 0; {
		m := specTag.FindString(line[i:])
		if m == "" || strings.HasPrefix(line[i+len(m):], " (3.1.1") {
			end := min(len(line), i+24)
			if j := strings.IndexByte(line[i:], ']'); j >= 0 && j < 24 {
				end = i + j + 1
			}
			bad = append(bad, line[i:end])
		}
		next := strings.Index(line[i+1:], "[MQTT-")
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return bad
}

// TestSpecTags scans every .go file of the module, code and tests, and
// names file:line for each spec tag that does not follow the convention.
func TestSpecTags(t *testing.T) {
	_, root := modulePackages(t)
	files := 0
	err := walkModule(root, true, func(path string) error {
		if !strings.HasSuffix(path, ".go") || path == filepath.Join(root, "internal", "archtest", "spectags_test.go") {
			return nil // not a .go file, or this checker with its bad examples
		}
		files++
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		rel, _ := filepath.Rel(root, path)
		for n := 1; sc.Scan(); n++ {
			for _, b := range badSpecTags(sc.Text()) {
				t.Errorf("%s:%d: %q: write [MQTT-x.y.z-n] (5.0), [MQTT-x.y.z-n](3.1.1), or a section without brackets (5.0 §x.y.z)", rel, n, b)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("scanned %d .go files under %s: the walk missed the module", files, root)
	}
}

// TestSpecTagRule: the check accepts the convention and nothing else.
func TestSpecTagRule(t *testing.T) {
	for line, want := range map[string]int{
		"// [MQTT-3.3.4-9]":                          0,
		"// [MQTT-3.1.2-24](3.1.1) keepalive":        0,
		"x // [MQTT-4.7.1-1] [MQTT-4.7.1-2](3.1.1).": 0,
		"// 5.0 §1.5.5, 3.1.1 §2.2.3":                0,
		"// [MQTT-1.5.5]":                            1,
		"// [MQTT-3.1.2-?]":                          1,
		"// [MQTT-3.1.2-*] in each section":          1,
		"// [MQTT-3-8.3-4]":                          1,
		"// [MQTT-2.2.2.2]":                          1,
		"// [MQTT-3.1.2-24] (3.1.1)":                 1, // the mark belongs to the tag, no space
		"// [MQTT-3.1.0-1], [MQTT-3.1.2]":            1,
	} {
		if got := badSpecTags(line); len(got) != want {
			t.Errorf("%q: %d bad tags %q, want %d", line, len(got), got, want)
		}
	}
}
