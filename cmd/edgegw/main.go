// Command edgegw is the MQTT edge gateway: an embedded broker for local
// sensors (TCP, WebSocket, serial) with durable bridges to cloud brokers.
//
//	edgegw [--config FILE]               run the gateway
//	edgegw check-config [--config FILE]  validate and print the effective config
//	edgegw version                       print version, commit, Go version and platform
//	edgegw passwd FILE USER              add or update a user in a password file
//	edgegw sensor --device PATH          simulate a serial MQTT sensor
//	edgegw help [COMMAND]                list the commands, or a command's flags
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
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/edgegw/edgegw/internal/config"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // the gateway failed while running
	exitUsage   = 2 // bad usage or invalid configuration
)

// command is one subcommand. fn gets the arguments after the command name
// and parses them with newFlags, so `-h`/`--help` print its help (from
// args and help) on stdout and exit 0.
type command struct {
	name    string
	args    string // synopsis after the name
	summary string // one line, for `edgegw help`
	help    string // a paragraph, for `edgegw help NAME` and NAME --help
	fn      func(args []string, stdout, stderr io.Writer) int
}

// commands is filled in init because help refers to it.
var commands []command

func init() {
	commands = []command{
		{"run", "[--config FILE]", "run the gateway (the default command)",
			"Runs the gateway until SIGINT or SIGTERM; SIGHUP reloads what can change live.\n" +
				"Config problems are printed one per line and exit with status 2.", cmdRun},
		{"check-config", "[--config FILE]", "validate the config and print the effective config",
			"Loads the config with the environment overrides, opens and parses every file it\n" +
				"names (password and ACL files, TLS certificates, keys and CAs), prints each\n" +
				"problem with its key on stderr and exits 2, or prints the effective config\n" +
				"on stdout and exits 0. Warnings (certificates near expiry, listeners open to\n" +
				"anonymous clients from the network) go to stderr and do not fail.", cmdCheckConfig},
		{"version", "", "print version, commit, Go version and platform",
			"Prints the version, the commit, the Go version and the platform; ARM builds\n" +
				"name their GOARM (linux/arm (GOARM=6) for ARMv6 boards such as the Pi Zero).", cmdVersion},
		{"help", "[COMMAND]", "show this help, or a command's", "", cmdHelp},
		{"passwd", "FILE USER", "add or update a user in a password file",
			"Adds USER to the password file FILE, or changes its password (bcrypt), creating\n" +
				"FILE (mode 0640) if needed; an existing FILE keeps its owner, group and mode.\n" +
				"On a terminal it asks for the password twice without echo;\n" +
				"otherwise it reads the password from the first line of stdin:\n" +
				"  echo 'secret' | edgegw passwd /etc/edgegw/passwd alice\n" +
				"Reload a running gateway with SIGHUP (systemctl reload edgegw).", cmdPasswd},
		{"sensor", "--device PATH [flags]", "simulate a serial MQTT sensor (to try a serial listener)",
			sensorHelp, cmdSensor},
		{"ledger", "[--config FILE]", "print where every message each bridge accepted went",
			"Asks the running gateway (at metrics.address, /ledger) for each bridge's delivery\n" +
				"ledger: accepted = delivered + in flight + queued + dropped + unknown, with the\n" +
				"drops by reason and the messages rejected since the start (docs/bridge.md).", cmdLedger},
	}
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain dispatches to a subcommand and returns the exit status.
func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 {
			switch args[0] {
			case "-h", "-help", "--help":
				return cmdHelp(nil, stdout, stderr)
			case "-v", "-version", "--version":
				return cmdVersion(args[1:], stdout, stderr)
			}
		}
		return cmdRun(args, stdout, stderr)
	}
	if c, ok := findCommand(args[0]); ok {
		return c.fn(args[1:], stdout, stderr)
	}
	if args[0] == "man" { // hidden: the package build makes edgegw(1) with it (man.go)
		return cmdMan(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "edgegw: unknown command %q (see edgegw help)\n", args[0])
	return exitUsage
}

func findCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// configFlags parses the flags shared by run and check-config; ok false
// means return code.
func configFlags(name string, args []string, stdout, stderr io.Writer) (path string, code int, ok bool) {
	fs := newFlags(name, stdout, stderr)
	fs.StringVar(&path, "config", os.Getenv(config.EnvConfig), "config `FILE` (default $"+config.EnvConfig+"; none = built-in defaults)")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return "", code, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "edgegw %s: unexpected argument %q\n", name, fs.Arg(0))
		printCommandHelp(fs, stderr)
		return "", exitUsage, false
	}
	return path, exitOK, true
}

// loadChecked loads path with the process environment and runs the
// preflight checks of the files it names. Every problem is printed to pw,
// one per line, each with its source and key; ok is false if there was
// any. The warnings are printed first when printWarnings is set, and
// returned (for run to log).
func loadChecked(path string, pw problemWriter, printWarnings bool) (cfg config.Config, warnings config.Errors, ok bool) {
	cfg, err := config.Load(path, os.Environ())
	var es config.Errors
	if err != nil && !errors.As(err, &es) {
		pw.line(prioErr, "edgegw: %v", err)
		return cfg, nil, false
	}
	f := preflight(cfg, path, time.Now())
	if printWarnings {
		for _, w := range f.warnings {
			pw.line(prioWarning, "warning: %s", w)
		}
	}
	es = append(es, f.errs...)
	for _, e := range es {
		pw.line(prioErr, "%s", e)
	}
	if len(es) > 0 {
		pw.line(prioErr, "edgegw: invalid configuration: %d problem(s)", len(es))
		return cfg, f.warnings, false
	}
	return cfg, f.warnings, true
}

func cmdCheckConfig(args []string, stdout, stderr io.Writer) int {
	path, code, ok := configFlags("check-config", args, stdout, stderr)
	if !ok {
		return code
	}
	pw := problemWriter{w: stderr, journal: underJournal(stderr, os.Getenv)}
	cfg, _, ok := loadChecked(path, pw, true)
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

func cmdRun(args []string, stdout, stderr io.Writer) int {
	path, code, ok := configFlags("run", args, stdout, stderr)
	if !ok {
		return code
	}
	journal := underJournal(stderr, os.Getenv)
	cfg, warnings, ok := loadChecked(path, problemWriter{w: stderr, journal: journal}, false)
	if !ok {
		return exitUsage
	}
	level := new(slog.LevelVar)
	log := newLeveledLogger(cfg.Log, stderr, level, journal)
	ctx, stop := stopOnSignal(log)
	defer stop()
	rs := applyRuntime(cfg.Limits, os.Getenv, processRuntime())
	procsShown, stopProcs := governProcs(ctx, os.Getenv)
	defer stopProcs()
	log.Info("starting", "version", buildVersion(), "commit", buildCommit(), "platform", platform(), "config", path,
		"gc_percent", rs.GCPercent, "memory_limit", config.FormatSize(rs.MemoryLimit), "runtime_env", rs.Env, "procs", procsShown)
	for _, w := range warnings {
		log.Warn("config warning", "key", w.Key, "problem", w.Msg)
	}
	if err := runGateway(ctx, runParams{cfg: cfg, path: path, log: log, level: level}); err != nil {
		// One line per problem: a joined error holds several.
		for _, line := range strings.Split(err.Error(), "\n") {
			log.Error("gateway failed", "err", line)
		}
		if errors.As(err, new(configError)) {
			return exitUsage
		}
		return exitFailure
	}
	log.Info("stopped")
	return exitOK
}

// stopOnSignal returns a context cancelled by the first SIGINT or SIGTERM,
// which is logged; a second one ends the process at once (Go's default).
// stop releases the signals and waits for the watcher.
func stopOnSignal(log *slog.Logger) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { // owned by stop
		defer close(done)
		select {
		case s := <-sigs:
			signal.Stop(sigs)
			log.Info("signal received; stopping (send it again to exit at once)", "signal", s.String())
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel()
		<-done
		signal.Stop(sigs)
	}
}
