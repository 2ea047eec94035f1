// Command edgegw is the MQTT edge gateway: an embedded broker for local
// sensors (TCP, WebSocket, serial) with durable bridges to cloud brokers.
//
//	edgegw [--config FILE] [--listen HOST:PORT]  run the gateway
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
	"flag"
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
		{"run", "[--config FILE] [--listen HOST:PORT] [--env-file FILE]", "run the gateway (the default command)",
			"Runs the gateway until SIGINT or SIGTERM; SIGHUP reloads what can change live.\n" +
				"Config problems are printed one per line and exit with status 2.\n" +
				"Without a config, --listen 127.0.0.1:1884 (or $EDGEGW_LISTEN) moves the built-in\n" +
				"listener off 1883.", cmdRun},
		{"check-config", "[--config FILE] [--env-file FILE]", "validate the config and print the effective config",
			"Loads the config with the environment overrides, as the service does: the process's\n" +
				"environment and the service's environment file (" + DefaultEnvFile + " when it exists,\n" +
				"or --env-file), and names the EDGEGW_* variables in effect; opens and parses every file it\n" +
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
		{"ledger", "[--config FILE] [--env-file FILE]", "print where every message each bridge accepted went",
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

// configArgs are the flags shared by run, check-config and ledger.
type configArgs struct {
	path    string // --config
	envFile string // --env-file ("" none)
	listen  string // --listen ("" none)
}

// configFlags parses the flags shared by run, check-config and ledger;
// ok false means return code. With serviceEnv (check-config and ledger)
// --env-file defaults to DefaultEnvFile when it exists; run reads none
// unless told (systemd sets the service's environment).
func configFlags(name string, args []string, stdout, stderr io.Writer, serviceEnv bool) (ca configArgs, code int, ok bool) {
	fs := newFlags(name, stdout, stderr)
	fs.StringVar(&ca.path, "config", os.Getenv(config.EnvConfig), "config `FILE` (default $"+config.EnvConfig+"; none = built-in defaults)")
	envHelp := "read environment variables from `FILE` (KEY=VALUE lines, as systemd's EnvironmentFile=) on top of the process's"
	if serviceEnv {
		envHelp += "; default " + DefaultEnvFile + " when it exists, as the service reads it; --env-file= reads none"
	}
	fs.StringVar(&ca.envFile, "env-file", "", envHelp)
	fs.StringVar(&ca.listen, "listen", "", "move the built-in listener (used when the config lists none) to `HOST:PORT`, as $"+config.EnvListen+" does")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return ca, code, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "edgegw %s: unexpected argument %q\n", name, fs.Arg(0))
		printCommandHelp(fs, stderr)
		return ca, exitUsage, false
	}
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "env-file" })
	if serviceEnv && !given {
		if _, err := os.Stat(DefaultEnvFile); err == nil {
			ca.envFile = DefaultEnvFile
		}
	}
	return ca, exitOK, true
}

// loadChecked loads the config of ca with its environment and runs the
// preflight checks of the files it names. Every problem is printed to pw,
// one per line, each with its source and key; ok is false if there was
// any. The warnings are printed first when printWarnings is set, and
// returned (for run to log).
func loadChecked(ca configArgs, env loadEnv, pw problemWriter, printWarnings bool) (cfg config.Config, warnings config.Errors, ok bool) {
	cfg, err := config.Load(ca.path, env.env)
	var es config.Errors
	if err != nil && !errors.As(err, &es) {
		pw.line(prioErr, "edgegw: %v", err)
		return cfg, nil, false
	}
	f := preflight(cfg, ca.path, time.Now())
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
	ca, code, ok := configFlags("check-config", args, stdout, stderr, true)
	if !ok {
		return code
	}
	pw := problemWriter{w: stderr, journal: underJournal(stderr, os.Getenv)}
	env, err := newLoadEnv(ca.envFile, ca.listen)
	if err != nil {
		pw.line(prioErr, "edgegw: %v", err)
		return exitUsage
	}
	cfg, _, ok := loadChecked(ca, env, pw, true)
	if !ok {
		return exitUsage
	}
	src := "built-in defaults"
	if ca.path != "" {
		src = ca.path
	}
	fmt.Fprintf(stdout, "# edgegw effective configuration: %s with environment overrides; secrets redacted\n", src)
	if env.file != "" {
		fmt.Fprintf(stdout, "# environment file %s (as the service reads it) sets: %s\n", env.file, orNone(env.fromFile))
	} else {
		fmt.Fprintf(stdout, "# environment file: none\n")
	}
	fmt.Fprintf(stdout, "# environment overrides: %s\n", orNone(env.overrides()))
	if err := cfg.WriteYAML(stdout); err != nil {
		fmt.Fprintf(stderr, "edgegw: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// orNone joins names with ", ", or says none.
func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	ca, code, ok := configFlags("run", args, stdout, stderr, false)
	if !ok {
		return code
	}
	path := ca.path
	journal := underJournal(stderr, os.Getenv)
	pw := problemWriter{w: stderr, journal: journal}
	env, err := newLoadEnv(ca.envFile, ca.listen)
	if err != nil {
		pw.line(prioErr, "edgegw: %v", err)
		return exitUsage
	}
	cfg, warnings, ok := loadChecked(ca, env, pw, false)
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
	if err := runGateway(ctx, runParams{cfg: cfg, path: path, env: env.env, log: log, level: level}); err != nil {
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
