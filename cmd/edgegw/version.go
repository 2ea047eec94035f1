package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at build time: go build -ldflags "-X main.version=... -X main.commit=..."
// (see the Makefile). Plain builds fall back to the module's build info.
var (
	version = "dev"
	commit  = "unknown"
)

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version", stdout, stderr)
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	v, c := buildVersion(), buildCommit()
	if versionNamesCommit(v, c) {
		fmt.Fprintf(stdout, "edgegw %s %s %s\n", v, runtime.Version(), platform())
	} else {
		fmt.Fprintf(stdout, "edgegw %s commit %s %s %s\n", v, c, runtime.Version(), platform())
	}
	return exitOK
}

// versionLine is version v of commit c for people: "1.2.3 (abc1234)", or v
// alone when it already names the commit. A build from a commit without a
// release tag gets the commit as its version (git describe --always), and
// "c9a16ce (c9a16ce)" shows one hash twice.
func versionLine(v, c string) string {
	if c == "unknown" || versionNamesCommit(v, c) {
		return v
	}
	return v + " (" + c + ")"
}

// versionNamesCommit reports whether version v already names commit c:
// it is the commit's hash (either may be the shorter, either may end in
// "-dirty"), or git describe's "TAG-N-gHASH" for it.
func versionNamesCommit(v, c string) bool {
	v, c = strings.TrimSuffix(v, "-dirty"), strings.TrimSuffix(c, "-dirty")
	if !isHex(c) {
		return false
	}
	if i := strings.LastIndex(v, "-g"); i >= 0 && !isHex(v) {
		v = v[i+2:] // git describe: TAG-N-gHASH
	}
	return isHex(v) && (strings.HasPrefix(v, c) || strings.HasPrefix(c, v))
}

// isHex reports whether s looks like an abbreviated git hash (git never
// abbreviates below 4 digits).
func isHex(s string) bool {
	if len(s) < 4 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}

// platform is GOOS/GOARCH, with the ARM version of 32-bit ARM builds from
// the build info: "linux/arm (GOARM=6)". ARMv6 (Pi Zero, Pi 1) and ARMv7
// builds are otherwise indistinguishable.
func platform() string {
	p := runtime.GOOS + "/" + runtime.GOARCH
	if runtime.GOARCH != "arm" {
		return p
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		return p + goarmSuffix(bi.Settings)
	}
	return p
}

// goarmSuffix is " (GOARM=v)" from the GOARM build setting, or "".
func goarmSuffix(settings []debug.BuildSetting) string {
	for _, s := range settings {
		if s.Key == "GOARM" && s.Value != "" {
			return " (GOARM=" + s.Value + ")"
		}
	}
	return ""
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
