// Command edgegw is the MQTT edge gateway: an embedded broker for local
// sensors (TCP, WebSocket, serial) with durable bridges to cloud brokers.
//
//	edgegw [--config FILE]               run the gateway
//	edgegw check-config [--config FILE]  validate and print the effective config
//	edgegw version                       print version, commit and Go version
//	edgegw help                          list the commands
//
// The config file defaults to $EDGEGW_CONFIG; with neither, built-in
// defaults give a local broker on 127.0.0.1:1883. Exit status: 0 ok,
// 1 the gateway failed while running, 2 bad usage or invalid config.
//
// Subcommands are listed in the commands table below; a new one (passwd,
// sensor, ...) adds one entry there and its function in its own file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/edgegw/edgegw/internal/config"
)

// Set at build time: go build -ldflags "-X main.version=... -X main.commit=..."
// (see the Makefile). Plain builds fall back to the module's build info.
var (
	version = "dev"
	commit  = "unknown"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // the gateway failed while running
	exitUsage   = 2 // bad usage or invalid configuration
)

// command is one subcommand. fn gets the arguments after the command name.
type command struct {
	name    string
	summary string
	fn      func(args []string, stdout, stderr io.Writer) int
}

// commands is filled in init because help refers to it.
var commands []command

func init() {
	commands = []command{
		{"run", "run the gateway (the default command)", cmdRun},
		{"check-config", "validate the config and print the effective config", cmdCheckConfig},
		{"version", "print version, commit and Go version", cmdVersion},
		{"help", "show this help", cmdHelp},
		{"passwd", "add or update a user in a password file: passwd FILE USER", cmdPasswd},
		// {"sensor", "...", cmdSensor},
	}
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain dispatches to a subcommand and returns the exit status.
func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			return cmdHelp(nil, stdout, stderr)
		}
		return cmdRun(args, stdout, stderr)
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.fn(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "edgegw: unknown command %q (see edgegw help)\n", args[0])
	return exitUsage
}

func cmdHelp(_ []string, stdout, _ io.Writer) int {
	fmt.Fprintf(stdout, "edgegw %s: MQTT edge gateway\n\nUsage:\n  edgegw [--config FILE]\n  edgegw <command> [flags]\n\nCommands:\n", version)
	for _, c := range commands {
		fmt.Fprintf(stdout, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(stdout, "\nThe config file defaults to $%s; without one, built-in defaults\n"+
		"give a local broker on 127.0.0.1:1883. Keys can be overridden with\n"+
		"EDGEGW_<SECTION>_<KEY>=value (see docs/config.md).\n", config.EnvConfig)
	return exitOK
}

// configFlags parses the flags shared by run and check-config.
func configFlags(name string, args []string, stderr io.Writer) (path string, ok bool) {
	fs := flag.NewFlagSet("edgegw "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&path, "config", os.Getenv(config.EnvConfig), "config `FILE` (default $"+config.EnvConfig+"; none = built-in defaults)")
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "edgegw %s: unexpected argument %q\n", name, fs.Arg(0))
		fs.Usage()
		return "", false
	}
	return path, true
}

// loadConfig loads path with the process environment, printing every
// problem to stderr on failure.
func loadConfig(path string, stderr io.Writer) (config.Config, bool) {
	cfg, err := config.Load(path, os.Environ())
	if err == nil {
		return cfg, true
	}
	var es config.Errors
	if errors.As(err, &es) {
		for _, e := range es {
			fmt.Fprintln(stderr, e)
		}
		fmt.Fprintf(stderr, "edgegw: invalid configuration: %d problem(s)\n", len(es))
	} else {
		fmt.Fprintf(stderr, "edgegw: %v\n", err)
	}
	return cfg, false
}

func cmdCheckConfig(args []string, stdout, stderr io.Writer) int {
	path, ok := configFlags("check-config", args, stderr)
	if !ok {
		return exitUsage
	}
	cfg, ok := loadConfig(path, stderr)
	if !ok {
		return exitUsage
	}
	src := "built-in defaults"
	if path != "" {
		src = path
	}
	fmt.Fprintf(stdout, "# edgegw effective configuration: %s with environment overrides; secrets redacted\n", src)
	if err := cfg.WriteYAML(stdout); err != nil {
		fmt.Fprintf(stderr, "edgegw: %v\n", err)
		return exitFailure
	}
	return exitOK
}

func cmdRun(args []string, _, stderr io.Writer) int {
	path, ok := configFlags("run", args, stderr)
	if !ok {
		return exitUsage
	}
	cfg, ok := loadConfig(path, stderr)
	if !ok {
		return exitUsage
	}
	level := new(slog.LevelVar)
	log := newLeveledLogger(cfg.Log, stderr, level)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rs := applyRuntime(cfg.Limits, os.Getenv, processRuntime())
	log.Info("starting", "version", version, "commit", buildCommit(), "config", path,
		"gc_percent", rs.GCPercent, "memory_limit", config.FormatSize(rs.MemoryLimit), "runtime_env", rs.Env)
	if err := runGateway(ctx, runParams{cfg: cfg, path: path, log: log, level: level}); err != nil {
		log.Error("stopped", "err", err)
		return exitFailure
	}
	log.Info("stopped")
	return exitOK
}

// newLogger builds the process logger from the log section (to w, which is
// stderr: the journal under systemd). The config is validated, so unknown
// values do not occur; they fall back to info/text.
func newLogger(c config.Log, w io.Writer) *slog.Logger {
	return newLeveledLogger(c, w, new(slog.LevelVar))
}

// parseLevel maps log.level to a slog level (validated config: unknown is info).
func parseLevel(s string) slog.Level {
	switch s {
	case config.LevelDebug:
		return slog.LevelDebug
	case config.LevelWarn:
		return slog.LevelWarn
	case config.LevelError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// newLeveledLogger is newLogger with the level in lv, so SIGHUP can change it.
func newLeveledLogger(c config.Log, w io.Writer, lv *slog.LevelVar) *slog.Logger {
	lv.Set(parseLevel(c.Level))
	opts := &slog.HandlerOptions{Level: lv}
	if c.Format == config.FormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func cmdVersion(_ []string, stdout, _ io.Writer) int {
	fmt.Fprintf(stdout, "edgegw %s commit %s %s %s/%s\n", buildVersion(), buildCommit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}

// buildVersion is -X main.version, else the module version from the build
// info (set by go install module@version), else "dev".
func buildVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}

// buildCommit is -X main.commit, else the VCS revision stamped by go build
// (12 hex digits, "-dirty" when modified), else "unknown".
func buildCommit() string {
	if commit != "unknown" {
		return commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return commit
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return commit
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
