package packaging_test

import (
	"debug/buildinfo"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// maxArm64Bytes is the size budget of the stripped linux/arm64 binary (as
// `make dist` builds it). Measured 9,961,634 bytes (9.5 MiB) with go1.26.8
// before the bridge was linked, and 10,944,674 bytes (10.4 MiB) with
// everything (bridge with paho and the spool included); 8,978,594 bytes
// (8.6 MiB) once /metrics no longer linked prometheus/client_golang and
// protobuf. The bound, set at the first measurement plus about 25%, leaves
// ~39% headroom now. Raise it on purpose, in the commit that pays for the
// growth, and say why.
const maxArm64Bytes = 12_500_000

// allowedModules are the modules the binary may link, beside the standard
// library and edgegw itself. A new dependency fails TestArm64Dependencies
// until it is added here and to packaging/copyright (its license ships in
// the .deb). Entries not linked yet are fine (the bridge brings paho and
// x/net).
var allowedModules = []string{
	"github.com/coreos/go-systemd/v22",    // sd_notify, watchdog
	"github.com/eclipse/paho.golang",      // bridge client, MQTT 5 uplinks
	"github.com/eclipse/paho.mqtt.golang", // bridge client
	"github.com/fsnotify/fsnotify",        // viper
	"github.com/go-viper/mapstructure/v2", // config decoding
	"github.com/gorilla/websocket",        // websocket listener
	"github.com/pelletier/go-toml/v2",     // viper
	"github.com/sagikazarmark/locafero",   // viper
	"github.com/sourcegraph/conc",         // viper
	"github.com/spf13/afero",              // viper
	"github.com/spf13/cast",               // viper
	"github.com/spf13/pflag",              // viper
	"github.com/spf13/viper",              // config
	"github.com/subosito/gotenv",          // viper
	"github.com/tarm/serial",              // serial listener
	"go.yaml.in/yaml/v3",                  // config, check-config output
	"golang.org/x/crypto",                 // bcrypt (passwd, auth)
	"golang.org/x/net",                    // paho (proxy), websocket
	"golang.org/x/sync",                   // errgroup
	"golang.org/x/sys",                    // serial ioctls, runtime support
	"golang.org/x/term",                   // passwd prompt
	"golang.org/x/text",                   // viper, x/net
}

var arm64 struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// buildArm64 builds ./cmd/edgegw for linux/arm64 once per test run, the
// way `make dist` does (static, -trimpath, stripped).
func buildArm64(t *testing.T) string {
	t.Helper()
	arm64.once.Do(func() {
		dir, err := os.MkdirTemp("", "edgegw-size-")
		if err != nil {
			arm64.err = err
			return
		}
		arm64.path = filepath.Join(dir, "edgegw")
		goBin, err := exec.LookPath("go")
		if err != nil {
			arm64.err = err
			return
		}
		cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", arm64.path, "./cmd/edgegw")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
		arm64.out, arm64.err = cmd.CombinedOutput()
	})
	if arm64.err != nil {
		t.Fatalf("build linux/arm64: %v\n%s", arm64.err, arm64.out)
	}
	return arm64.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if arm64.path != "" {
		os.RemoveAll(filepath.Dir(arm64.path))
	}
	os.Exit(code)
}

func TestArm64BinarySize(t *testing.T) {
	fi, err := os.Stat(buildArm64(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("linux/arm64 binary: %d bytes (%.2f MiB), budget %d", fi.Size(), float64(fi.Size())/(1<<20), maxArm64Bytes)
	if fi.Size() > maxArm64Bytes {
		t.Errorf("linux/arm64 binary is %d bytes, over the %d budget (packaging/binary_test.go)", fi.Size(), maxArm64Bytes)
	}
}

// TestArm64Dependencies reads the module list embedded in the binary (what
// `go version -m` prints) and fails on any module not in allowedModules.
func TestArm64Dependencies(t *testing.T) {
	bi, err := buildinfo.ReadFile(buildArm64(t))
	if err != nil {
		t.Fatal(err)
	}
	if bi.Main.Path != "github.com/edgegw/edgegw" {
		t.Errorf("main module %q", bi.Main.Path)
	}
	for _, d := range bi.Deps {
		path := d.Path
		if d.Replace != nil {
			t.Errorf("module %s is replaced by %s %s: releases must not ship replaced modules", d.Path, d.Replace.Path, d.Replace.Version)
		}
		if !slices.Contains(allowedModules, path) {
			t.Errorf("unexpected module linked: %s %s (add it to allowedModules and packaging/copyright, or drop the import)", path, d.Version)
		}
	}
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" && s.Value != "0" {
			t.Errorf("CGO_ENABLED=%s: the binary must be static", s.Value)
		}
	}
}

// TestCopyrightCoversModules: every allowed module has a paragraph in the
// Debian copyright file, since its license ships in the .deb.
func TestCopyrightCoversModules(t *testing.T) {
	b, err := os.ReadFile("copyright")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, para := range strings.Split(string(b), "\n\n") {
		if rest, ok := strings.CutPrefix(para, "Files:"); ok {
			field, _, _ := strings.Cut(rest, "\nCopyright:")
			files = append(files, strings.Fields(field)...)
		}
	}
	for _, m := range allowedModules {
		if !slices.Contains(files, m) {
			t.Errorf("packaging/copyright has no Files: paragraph for %s", m)
		}
	}
}
