package config

import (
	"fmt"
	"strconv"
	"strings"
)

// FieldError is one problem with one configuration key.
type FieldError struct {
	// Source is where the value came from: the config file path or
	// "$EDGEGW_..." for an environment override; "" when validating a
	// Config built in code.
	Source string
	// Line is the line of Source the problem is on, when known (YAML
	// syntax errors); 0 otherwise.
	Line int
	// Key is the key path, e.g. "listeners[0].address"; "" for problems
	// with the file as a whole.
	Key string
	// Msg says what is wrong, for an operator.
	Msg string
}

// Error renders "source:line: key: msg", leaving out the empty parts (the
// file:line form is the one editors and terminals jump to).
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a configuration, in the order found. As
// an error it renders one problem per line. Use errors.As to get at it.
type Errors []*FieldError

// Error renders one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems as errors (for errors.Is/As).
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// add appends a problem with a formatted message.
func (es *Errors) add(key, format string, args ...any) {
	*es = append(*es, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// err returns es as an error, or nil when empty.
func (es Errors) err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}
