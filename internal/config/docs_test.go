package config

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const configDoc = "../../docs/config.md"

// typoExamples are wrong keys the page shows on purpose (check-config's
// "did you mean").
var typoExamples = []string{"listeners[0].adress"}

// docRow is one key row of docs/config.md's tables.
type docRow struct {
	n     int      // line number
	key   string   // the full key
	cells []string // the row's cells; an escaped \| stays inside its cell (as ¦)
}

// configDocRows returns the key rows of docs/config.md: "| `key` | ...",
// relative to the "### section" above them (and to bridges.topics after
// "Each `topics` entry").
func configDocRows(page string) []docRow {
	var rows []docRow
	section := ""
	for n, line := range strings.Split(page, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			section = ""
		case strings.HasPrefix(line, "### "):
			section = strings.TrimPrefix(line, "### ")
		case strings.HasPrefix(line, "Each `topics` entry"):
			section = "bridges.topics"
		case section != "" && strings.HasPrefix(line, "| `"):
			key := strings.TrimPrefix(line, "| `")
			key = key[:strings.Index(key, "`")]
			if top, _, _ := strings.Cut(section, "."); !strings.HasPrefix(key, top+".") {
				key = section + "." + key
			}
			rows = append(rows, docRow{n + 1, key, strings.Split(strings.ReplaceAll(line, `\|`, "¦"), "|")})
		}
	}
	return rows
}

// TestConfigDoc keeps docs/config.md and the schema in step: every key of
// the schema has a row in a table of its section, and every key the page
// names (in a table or in `section.key` form in the text) exists.
func TestConfigDoc(t *testing.T) {
	raw, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	schema := schemaKeys(reflectTypeOfConfig(), "")
	exists := func(k string) bool {
		for _, s := range schema {
			if s == k || strings.HasPrefix(s, k+".") {
				return true
			}
		}
		return false
	}

	documented := map[string]bool{}
	for _, r := range configDocRows(string(raw)) {
		if !exists(r.key) {
			t.Errorf("%s:%d: documents %q, which is not a config key", configDoc, r.n, r.key)
		}
		documented[r.key] = true
	}
	for _, k := range schema {
		if !documented[k] {
			t.Errorf("%s: no table row for %q", configDoc, k)
		}
	}

	// Keys named in the text, e.g. `listeners[0].tls.cert`, `metrics.address`.
	named := regexp.MustCompile("`((?:log|listeners|limits|sessions|auth|persistence|bridges|metrics)(?:\\[\\d+\\])?(?:\\.[a-z_]+(?:\\[\\d+\\])?)+)")
	index := regexp.MustCompile(`\[\d+\]`)
	for _, m := range named.FindAllStringSubmatch(string(raw), -1) {
		k := index.ReplaceAllString(m[1], "")
		if !exists(k) && !slices.Contains(typoExamples, m[1]) {
			t.Errorf("%s names %q, which is not a config key", configDoc, m[1])
		}
	}
}
