package config

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// The YAML parser (go.yaml.in/yaml/v3) names the line where the construct
// it was reading began, not the line of the problem: a key indented one
// space short on line 4 of a list that starts on line 2 is reported at
// "line 1", and a tab on line 3 at "line 2". An operator then looks for the
// mistake in the wrong place. The parser keeps the true position to itself,
// so yamlErrors finds it again: the problem is on the first line at which
// the text read so far stops parsing with the same complaint. Config files
// are short and this runs only after a failure, so parsing every prefix
// costs nothing that matters.

// maxSearchLines bounds that search; beyond it the line is left out rather
// than given wrong.
const maxSearchLines = 20000

// yamlErrors turns the error of reading the YAML file at path (content
// data) into problems that name the file and the line of each mistake.
func yamlErrors(path string, data []byte, err error) Errors {
	msg := strings.TrimPrefix(err.Error(), "While parsing config: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	// Decoding errors (a key given twice) come as a list, each with its
	// own line, which is right: they are found on the parsed tree.
	if rest, ok := strings.CutPrefix(msg, "unmarshal errors:\n"); ok {
		var es Errors
		for _, l := range strings.Split(rest, "\n") {
			line, text := splitLine(strings.TrimSpace(l))
			es = append(es, &FieldError{Source: path, Line: line, Msg: "invalid YAML: " + text})
		}
		return es
	}
	_, problem := splitLine(msg)
	return Errors{{Source: path, Line: problemLine(data, problem), Msg: "invalid YAML: " + problem + yamlHint(problem)}}
}

// splitLine splits "line N: text" into N and text; without that prefix
// the line is 0 (unknown).
func splitLine(s string) (int, string) {
	rest, ok := strings.CutPrefix(s, "line ")
	if !ok {
		return 0, s
	}
	num, text, ok := strings.Cut(rest, ": ")
	n, err := strconv.Atoi(num)
	if !ok || err != nil {
		return 0, s
	}
	return n, text
}

// problemLine is the first line of data at which the lines up to it fail
// to parse with problem, or 0 if there is none.
func problemLine(data []byte, problem string) int {
	end := 0
	for n := 1; end < len(data) && n <= maxSearchLines; n++ {
		if i := bytes.IndexByte(data[end:], '\n'); i >= 0 {
			end += i + 1
		} else {
			end = len(data)
		}
		var node yaml.Node
		err := yaml.Unmarshal(data[:end], &node)
		if err == nil {
			continue
		}
		_, p := splitLine(strings.TrimPrefix(err.Error(), "yaml: "))
		if p == problem {
			return n
		}
	}
	return 0
}

// yamlHint adds what to do about the parser's complaints an operator is
// most likely to meet.
func yamlHint(problem string) string {
	switch {
	case strings.Contains(problem, "tab character"):
		return " (indent with spaces, not tabs)"
	case strings.Contains(problem, "did not find expected key"),
		strings.Contains(problem, "did not find expected '-' indicator"),
		strings.Contains(problem, "mapping values are not allowed"):
		return " (check the indentation, and quote values that contain \": \")"
	case strings.Contains(problem, "found unexpected end of stream"):
		return " (a quote that is never closed?)"
	}
	return ""
}

// isParseError reports whether err is viper's error for a file that is not
// valid YAML (as opposed to one it could not read).
func isParseError(err error) bool {
	var pe viper.ConfigParseError
	return errors.As(err, &pe)
}
