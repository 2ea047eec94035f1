package metrics

import (
	"bufio"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// contentType is the Prometheus text exposition format, version 0.0.4.
const contentType = "text/plain; version=0.0.4; charset=utf-8"

// expo collects metric families for one scrape and writes them in the text
// exposition format: families sorted by name, each with its HELP and TYPE
// lines once, label pairs sorted by name (as Prometheus' Go client writes
// them, so dashboards and scrapers see the same series).
type expo struct {
	fams []*family
}

type family struct {
	name, help, typ string
	samples         []sample
}

type sample struct {
	suffix string // "", "_sum", "_count" (summaries)
	labels []labelPair
	value  float64
}

type labelPair struct{ name, value string }

func newExpo() *expo { return &expo{} }

func (e *expo) family(name, help, typ string) *family {
	f := &family{name: name, help: help, typ: typ}
	e.fams = append(e.fams, f)
	return f
}

func (e *expo) gauge(name, help string) *family   { return e.family(name, help, "gauge") }
func (e *expo) counter(name, help string) *family { return e.family(name, help, "counter") }

// v adds a sample with the label pairs given as name, value, name, value...
func (f *family) v(value float64, labels ...string) *family {
	return f.add("", value, labels...)
}

func (f *family) add(suffix string, value float64, labels ...string) *family {
	var lp []labelPair
	for i := 0; i+1 < len(labels); i += 2 {
		lp = append(lp, labelPair{labels[i], labels[i+1]})
	}
	slices.SortFunc(lp, func(a, b labelPair) int { return strings.Compare(a.name, b.name) })
	f.samples = append(f.samples, sample{suffix: suffix, labels: lp, value: value})
	return f
}

func (e *expo) writeTo(w io.Writer) error {
	bw := bufio.NewWriter(w)
	slices.SortStableFunc(e.fams, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	for _, f := range e.fams {
		if len(f.samples) == 0 {
			continue
		}
		bw.WriteString("# HELP ")
		bw.WriteString(f.name)
		bw.WriteByte(' ')
		bw.WriteString(escape(f.help, false))
		bw.WriteString("\n# TYPE ")
		bw.WriteString(f.name)
		bw.WriteByte(' ')
		bw.WriteString(f.typ)
		bw.WriteByte('\n')
		for _, s := range f.samples {
			bw.WriteString(f.name)
			bw.WriteString(s.suffix)
			if len(s.labels) > 0 {
				bw.WriteByte('{')
				for i, l := range s.labels {
					if i > 0 {
						bw.WriteByte(',')
					}
					bw.WriteString(l.name)
					bw.WriteString(`="`)
					bw.WriteString(escape(l.value, true))
					bw.WriteByte('"')
				}
				bw.WriteByte('}')
			}
			bw.WriteByte(' ')
			bw.WriteString(formatValue(s.value))
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

// escape escapes a HELP text (backslash, newline) or a label value (also
// the double quote).
func escape(s string, quote bool) string {
	if !strings.ContainsAny(s, "\\\n\"") {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '"' && quote:
			b.WriteString(`\"`)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	return slices.Sorted(maps.Keys(m))
}
