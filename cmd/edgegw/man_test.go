package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// renderMan formats roff source with groff as man(1) would, as plain
// ASCII, and fails the test on any groff warning.
func renderMan(t *testing.T, src string) string {
	t.Helper()
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Fatalf("groff not found (apt-get install groff-base; lintian depends on it): %v", err)
	}
	cmd := exec.Command(groff, "-man", "-Tascii", "-ww", "-P-cbou")
	cmd.Stdin = strings.NewReader(src)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || errb.Len() > 0 {
		t.Fatalf("groff: %v\n%s\nsource:\n%s", err, errb.String(), src)
	}
	return out.String()
}

// squash collapses every run of white space to one space, so text filled
// or indented by groff compares with the help's own line breaks.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// runMain runs edgegw with args in process and returns its exit status
// and stdout.
func runMain(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := realMain(args, &out, &errb)
	if errb.Len() > 0 {
		t.Errorf("edgegw %s: stderr %q", strings.Join(args, " "), errb.String())
	}
	return code, out.String()
}

// TestManPageIsTheHelp: edgegw(1) says what --help says. The page is
// rendered with groff as `man edgegw` shows it, and every line of
// `edgegw --help` and of each `edgegw COMMAND --help` must be found in it;
// a command, flag or sentence added to the help is in the page, and
// nothing the help prints is lost to roff's escapes.
func TestManPageIsTheHelp(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	code, src := runMain(t, "man")
	if code != exitOK {
		t.Fatalf("edgegw man: exit %d", code)
	}
	if !strings.Contains(src, `.TH EDGEGW 1 "2023-11-14" "edgegw dev"`) {
		t.Errorf("title line: want the date of SOURCE_DATE_EPOCH and the version:\n%.200s", src)
	}
	page := squash(renderMan(t, src))

	_, help := runMain(t, "--help")
	title, body, _ := strings.Cut(help, "\n")
	if want := "NAME edgegw - MQTT edge gateway SYNOPSIS"; title != "edgegw dev: MQTT edge gateway" || !strings.Contains(page, want) {
		t.Errorf("help title %q; page lacks %q", title, want)
	}
	for _, l := range strings.Split(body, "\n") {
		if l = squash(l); l != "" && l != "Usage:" && l != "Commands:" && !strings.Contains(page, l) {
			t.Errorf("--help line not in the man page: %q", l)
		}
	}
	for _, c := range commands {
		_, h := runMain(t, c.name, "--help")
		for i, l := range strings.Split(h, "\n") {
			if i == 0 {
				l = strings.TrimPrefix(l, "Usage: ")
			}
			if l = squash(l); l != "" && !strings.Contains(page, l) {
				t.Errorf("%s --help line not in the man page: %q", c.name, l)
			}
		}
	}
	if strings.Contains(help, "\n  man ") {
		t.Errorf("the hidden man command shows in --help:\n%s", help)
	}
}

// TestManPageEscapes: help text that roff would take for requests or
// escapes prints as itself.
func TestManPageEscapes(t *testing.T) {
	overview := "edgegw x: tag\n\nUsage:\n  edgegw -a\n\nCommands:\n  a   b\n\nnotes\n"
	cmd := "Usage: edgegw a\n\nA line\n.B not a request\n'also not\nback\\slash and \\fBnot bold\\fR\n  .example\nend\n"
	page := renderMan(t, manPage("1.0", "", overview, []string{cmd}))
	for _, want := range []string{".B not a request", "'also not", `back\slash and \fBnot bold\fR`, ".example", "edgegw -a"} {
		if !strings.Contains(page, want) {
			t.Errorf("rendered page lacks %q:\n%s", want, page)
		}
	}
}
