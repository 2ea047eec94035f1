package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpOfHelp: `edgegw help help` explains the help command like
// `edgegw help passwd` explains passwd, instead of calling help an unknown
// command; a command that does not exist is still refused.
func TestHelpOfHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := realMain([]string{"help", "help"}, &out, &errb); code != exitOK ||
		!strings.HasPrefix(out.String(), "Usage: edgegw help [COMMAND]") || errb.Len() > 0 {
		t.Errorf("help help: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := realMain([]string{"help", "frobnicate"}, &out, &errb); code != exitUsage ||
		!strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Errorf("help frobnicate: exit %d, stderr %q", code, errb.String())
	}
}

// TestHelpNamesInstalledDocs: the help points at the documentation where
// the .deb installs it, not only at the source tree's docs/.
func TestHelpNamesInstalledDocs(t *testing.T) {
	var out, errb bytes.Buffer
	realMain([]string{"help"}, &out, &errb)
	if !strings.Contains(out.String(), "/usr/share/doc/edgegw/") {
		t.Errorf("help does not name /usr/share/doc/edgegw/:\n%s", out.String())
	}
}
