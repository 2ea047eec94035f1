package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/edgegw/edgegw/internal/config"
)

// The help: `edgegw help` (the overview and the commands table), and each
// command's -h/--help (its usage, help paragraph and flags). The manual
// page is made from the same text (man.go).

func cmdHelp(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("help", stdout, stderr)
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		c, ok := findCommand(fs.Arg(0))
		if !ok {
			fmt.Fprintf(stderr, "edgegw help: unknown command %q\n", fs.Arg(0))
			return exitUsage
		}
		return c.fn([]string{"--help"}, stdout, stderr)
	}
	fmt.Fprintf(stdout, "edgegw %s: MQTT edge gateway\n\nUsage:\n  edgegw [--config FILE]\n  edgegw <command> [flags]\n  edgegw --version\n\nCommands:\n", buildVersion())
	for _, c := range commands {
		fmt.Fprintf(stdout, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(stdout, "\nRun `edgegw help COMMAND` or `edgegw COMMAND --help` for a command's flags.\n"+
		"The config file defaults to $%s; without one, built-in defaults give a\n"+
		"local broker on 127.0.0.1:1883 and metrics on %s. Keys can be overridden\n"+
		"with EDGEGW_<SECTION>_<KEY>=value (see config.md in /usr/share/doc/edgegw/,\n"+
		"docs/ in the source).\n"+
		"Exit status: 0 ok, 1 the gateway failed while running, 2 bad usage or invalid config.\n",
		config.EnvConfig, config.Default().Metrics.Address)
	return exitOK
}

// newFlags returns the flag set of a subcommand; parseFlags handles help.
func newFlags(name string, _, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("edgegw "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // parseFlags prints the help where it belongs
	return fs
}

// parseFlags parses args; ok is false when the command must return code:
// 0 after printing its help for -h/--help (on stdout), 2 for a bad flag
// (the error and the help on stderr).
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return exitOK, true
	case errors.Is(err, flag.ErrHelp):
		printCommandHelp(fs, stdout)
		return exitOK, false
	}
	printCommandHelp(fs, stderr)
	return exitUsage, false
}

// printCommandHelp writes a subcommand's usage, help and flags to w.
func printCommandHelp(fs *flag.FlagSet, w io.Writer) {
	name := strings.TrimPrefix(fs.Name(), "edgegw ")
	c, _ := findCommand(name)
	fmt.Fprintln(w, strings.TrimSpace("Usage: edgegw "+name+" "+c.args))
	if c.help != "" {
		fmt.Fprintf(w, "\n%s\n", c.help)
	} else {
		fmt.Fprintf(w, "\n%s.\n", strings.ToUpper(c.summary[:1])+c.summary[1:])
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nFlags:")
		out := fs.Output()
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
}
