package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A layoutRule is one "never" of the layout (docs/design.md, "Dependencies
// point one way"): the packages it constrains and the dependencies they
// must not have.
type layoutRule struct {
	rule    string                // the rule, as a reviewer reads it
	applies func(p *pkg) bool     // the packages it constrains
	bad     func(dep string) bool // a dependency it forbids
	direct  bool                  // check direct imports only (else every dependency, transitively)
}

// under reports whether path is the module's package rel or one below it.
func under(path string, rels ...string) bool {
	for _, rel := range rels {
		p := modulePath + "/" + rel
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

func inModule(path string) bool { return path == modulePath || strings.HasPrefix(path, modulePath+"/") }

// room is the top package of path's room: gateway for gateway/topics,
// bridge for bridge/spool, internal/config for itself.
func room(path string) string {
	rel := strings.TrimPrefix(path, modulePath+"/")
	parts := strings.Split(rel, "/")
	n := 1
	if parts[0] == "internal" || parts[0] == "cmd" {
		n = 2
	}
	if len(parts) < n {
		return path
	}
	return modulePath + "/" + strings.Join(parts[:n], "/")
}

// layoutRules builds the rules against pkgs (standard library membership
// comes from go list).
func layoutRules(pkgs map[string]*pkg) []layoutRule {
	std := func(dep string) bool { p := pkgs[dep]; return p != nil && p.Standard }
	stdlibOnly := func(rel string) func(string) bool {
		return func(dep string) bool { return !std(dep) && !under(dep, rel) }
	}
	return []layoutRule{
		{
			rule:    "the codec (gateway/packet) imports only the standard library",
			applies: func(p *pkg) bool { return under(p.ImportPath, "gateway/packet") },
			bad:     stdlibOnly("gateway/packet"),
		},
		{
			rule:    "the topic tree (gateway/topics) imports only the standard library",
			applies: func(p *pkg) bool { return under(p.ImportPath, "gateway/topics") },
			bad:     stdlibOnly("gateway/topics"),
		},
		{
			// docs/serial-framing.md: firmware tools use it as it is.
			rule:    "the serial framing (devices/framing) imports only the standard library",
			applies: func(p *pkg) bool { return under(p.ImportPath, "devices/framing") },
			bad:     stdlibOnly("devices/framing"),
		},
		{
			rule:    "the gateway (and its sub-packages) imports no bridge, listeners, devices or internal/config",
			applies: func(p *pkg) bool { return under(p.ImportPath, "gateway") },
			bad:     func(dep string) bool { return under(dep, "bridge", "listeners", "devices", "internal/config") },
		},
		{
			rule:    "devices import no gateway",
			applies: func(p *pkg) bool { return under(p.ImportPath, "devices") },
			bad:     func(dep string) bool { return under(dep, "gateway") },
		},
		{
			// The other half, that they reach it through the callback, is
			// TestListenersServeThroughEstablishFunc.
			rule:    "listeners never import the gateway; they hand connections to an EstablishFunc",
			applies: func(p *pkg) bool { return under(p.ImportPath, "listeners") },
			bad:     func(dep string) bool { return under(dep, "gateway") },
		},
		{
			// internal/ holds leaves the core may use (sockio, procs,
			// config); what needs the core itself lives with the binary.
			rule:    "internal/ is one floor, below the core: no package under internal/ imports gateway or bridge",
			applies: func(p *pkg) bool { return under(p.ImportPath, "internal") },
			bad:     func(dep string) bool { return under(dep, "gateway", "bridge") },
		},
		{
			// The binary's own packages (cmd/edgegw/internal/metrics and
			// status) read the core; the core never reads them back.
			rule:    "gateway and bridge never import cmd/ (the binary's packages, cmd/edgegw/internal/... among them)",
			applies: func(p *pkg) bool { return under(p.ImportPath, "gateway", "bridge") },
			bad:     func(dep string) bool { return under(dep, "cmd") },
		},
		{
			rule:    "viper is used only in internal/config and cmd/",
			applies: func(p *pkg) bool { return inModule(p.ImportPath) && !under(p.ImportPath, "internal/config", "cmd") },
			bad: func(dep string) bool {
				return dep == "github.com/spf13/viper" || strings.HasPrefix(dep, "github.com/spf13/viper/")
			},
			direct: true,
		},
		{
			rule: "libraries receive plain structs: only main packages import internal/config",
			applies: func(p *pkg) bool {
				return inModule(p.ImportPath) && p.Name != "main" && !under(p.ImportPath, "internal/config")
			},
			bad: func(dep string) bool { return under(dep, "internal/config") },
		},
		{
			// bridge/doc.go, "The session engine": session -> wire, one way.
			rule:    "the uplink's wire (bridge/wire) depends on neither the session engine (bridge/session) nor the bridge",
			applies: func(p *pkg) bool { return under(p.ImportPath, "bridge/wire") },
			bad:     func(dep string) bool { return dep == modulePath+"/bridge" || under(dep, "bridge/session") },
		},
		{
			// Its durable state goes through its own small Store
			// interface, which bridge/spool implements without either
			// importing the other.
			rule:    "the session engine (bridge/session) uses of the module only bridge/wire and gateway/packet",
			applies: func(p *pkg) bool { return under(p.ImportPath, "bridge/session") },
			bad: func(dep string) bool {
				return inModule(dep) && !under(dep, "bridge/session", "bridge/wire", "gateway/packet")
			},
		},
		{
			// The uplink is the bridge's own engine: paho is a codec
			// (3.1.1) and a WebSocket transport under it, never a client
			// steered from outside. The device simulator is a sensor,
			// and a sensor is a paho client.
			rule: "only bridge/wire (3.1.1 codec, WebSocket transport) and devices/sim import paho",
			applies: func(p *pkg) bool {
				return inModule(p.ImportPath) && !under(p.ImportPath, "bridge/wire", "devices/sim")
			},
			bad:    func(dep string) bool { return strings.HasPrefix(dep, "github.com/eclipse/paho") },
			direct: true,
		},
		{
			rule: "dependencies point one way: a room's sub-packages never import the room (gateway/topics never gateway, bridge/spool never bridge)",
			applies: func(p *pkg) bool {
				r := room(p.ImportPath)
				return inModule(p.ImportPath) && r != p.ImportPath && pkgs[r] != nil
			},
			bad: nil, // set per package below: the package's own room
		},
	}
}

// checkLayout returns one line per broken rule and offending dependency.
func checkLayout(pkgs map[string]*pkg) []string {
	var problems []string
	for _, r := range layoutRules(pkgs) {
		for _, path := range slices.Sorted(maps.Keys(pkgs)) {
			p := pkgs[path]
			if !inModule(path) || !r.applies(p) {
				continue
			}
			bad := r.bad
			if bad == nil {
				top := room(path)
				bad = func(dep string) bool { return dep == top }
			}
			deps, how := p.Deps, "depends on"
			if r.direct {
				deps, how = p.Imports, "imports"
			}
			for _, dep := range deps {
				if bad(dep) {
					problems = append(problems, fmt.Sprintf("%s %s %s: breaks %q",
						strings.TrimPrefix(path, modulePath+"/"), how, dep, r.rule))
				}
			}
		}
	}
	return problems
}

// TestLayout holds every "never" of the layout (docs/design.md) on the
// module as it is built (test files excluded).
func TestLayout(t *testing.T) {
	pkgs, _ := modulePackages(t)
	for _, want := range []string{"gateway", "gateway/packet", "gateway/topics", "listeners", "devices/framing", "bridge", "bridge/wire", "bridge/session", "internal/config", "internal/sockio", "cmd/edgegw/internal/metrics", "cmd/edgegw/internal/status"} {
		if pkgs[modulePath+"/"+want] == nil {
			t.Fatalf("go list did not list %s: the rules would check nothing", want)
		}
	}
	for _, p := range checkLayout(pkgs) {
		t.Error(p)
	}
}

// TestLayoutRulesCatch: each rule fails on a module that breaks it, so a
// rule that can never fire is found here, not in review.
func TestLayoutRulesCatch(t *testing.T) {
	m := func(rel string) string { return modulePath + "/" + rel }
	base := func() map[string]*pkg {
		pkgs := map[string]*pkg{}
		add := func(path, name string, std bool, deps ...string) {
			pkgs[path] = &pkg{ImportPath: path, Name: name, Standard: std, Imports: deps, Deps: deps}
		}
		add("fmt", "fmt", true)
		add("github.com/spf13/viper", "viper", false)
		add("github.com/gorilla/websocket", "websocket", false)
		add(m("gateway/packet"), "packet", false, "fmt")
		add(m("gateway/topics"), "topics", false, "fmt")
		add(m("devices/framing"), "framing", false, "fmt")
		add(m("internal/sockio"), "sockio", false, "fmt")
		add(m("gateway"), "gateway", false, m("gateway/packet"), m("gateway/topics"), m("internal/sockio"))
		add(m("listeners"), "listeners", false, m("devices/framing"), "github.com/gorilla/websocket")
		add("github.com/eclipse/paho.mqtt.golang/packets", "packets", false)
		add(m("bridge/spool"), "spool", false, "fmt")
		add(m("bridge/wire"), "wire", false, m("gateway/packet"), "github.com/eclipse/paho.mqtt.golang/packets")
		add(m("bridge/session"), "session", false, m("bridge/wire"), m("gateway/packet"))
		add(m("devices/sim"), "sim", false, "github.com/eclipse/paho.mqtt.golang/packets")
		add(m("bridge"), "bridge", false, m("bridge/spool"), m("bridge/session"), m("bridge/wire"), m("gateway"))
		add(m("internal/config"), "config", false, "github.com/spf13/viper")
		add(m("cmd/edgegw/internal/metrics"), "metrics", false, m("gateway"), m("bridge"))
		add(m("cmd/edgegw"), "main", false, m("internal/config"), m("gateway"), m("bridge"), m("listeners"), m("cmd/edgegw/internal/metrics"), "github.com/spf13/viper")
		return pkgs
	}
	if p := checkLayout(base()); len(p) != 0 {
		t.Fatalf("the clean fake module breaks rules: %q", p)
	}
	for _, tc := range []struct {
		pkg, dep string
		rule     string // a word of the rule that must fire
	}{
		{m("gateway/packet"), "github.com/gorilla/websocket", "codec"},
		{m("gateway/topics"), m("gateway/packet"), "topic tree"},
		{m("devices/framing"), "github.com/gorilla/websocket", "serial framing"},
		{m("gateway"), m("internal/config"), "gateway (and its sub-packages)"},
		{m("gateway/topics"), m("listeners"), "gateway (and its sub-packages)"},
		{m("gateway"), m("bridge/spool"), "gateway (and its sub-packages)"},
		{m("devices/framing"), m("gateway/packet"), "devices import no gateway"},
		{m("listeners"), m("gateway"), "listeners never import the gateway"},
		{m("bridge"), "github.com/spf13/viper", "viper"},
		{m("bridge"), m("internal/config"), "only main packages"},
		{m("bridge/spool"), m("bridge"), "sub-packages never import the room"},
		{m("bridge/wire"), m("bridge/session"), "uplink's wire"},
		{m("bridge/wire"), m("bridge"), "uplink's wire"},
		{m("bridge/session"), m("bridge/spool"), "session engine"},
		{m("bridge/session"), m("bridge"), "session engine"},
		{m("bridge"), "github.com/eclipse/paho.mqtt.golang", "import paho"},
		{m("gateway"), "github.com/eclipse/paho.golang/paho", "import paho"},
		{m("internal/sockio"), m("gateway"), "internal/ is one floor"},
		{m("internal/config"), m("bridge/spool"), "internal/ is one floor"},
		{m("gateway"), m("cmd/edgegw/internal/metrics"), "gateway and bridge never import cmd/"},
		{m("bridge/spool"), m("cmd/edgegw/internal/status"), "gateway and bridge never import cmd/"},
	} {
		pkgs := base()
		p := pkgs[tc.pkg]
		p.Imports = append(p.Imports, tc.dep)
		p.Deps = append(p.Deps, tc.dep)
		found := false
		for _, line := range checkLayout(pkgs) {
			if strings.Contains(line, tc.rule) && strings.Contains(line, tc.dep) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s importing %s: no rule about %q fired", tc.pkg, tc.dep, tc.rule)
		}
	}
}

// TestListenersServeThroughEstablishFunc: listeners reach the gateway only
// through the callback. TestLayout shows they cannot name anything of the
// gateway; this shows what they do instead: EstablishFunc is a function of a
// net.Conn, and every listener type's Serve takes (context.Context,
// EstablishFunc) and nothing else that could carry the gateway.
func TestListenersServeThroughEstablishFunc(t *testing.T) {
	pkgs, _ := modulePackages(t)
	lp := pkgs[modulePath+"/listeners"]
	fset := token.NewFileSet()
	var establish *ast.FuncType
	serves := map[string]*ast.FuncDecl{} // receiver type -> Serve
	for _, name := range lp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(lp.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == "EstablishFunc" {
						establish, _ = ts.Type.(*ast.FuncType)
					}
				}
			case *ast.FuncDecl:
				if d.Recv != nil && d.Name.Name == "Serve" {
					serves[typeString(d.Recv.List[0].Type)] = d
				}
			}
		}
	}
	if establish == nil {
		t.Fatal("listeners declares no func type EstablishFunc")
	}
	var params []string
	for _, f := range establish.Params.List {
		for range max(1, len(f.Names)) {
			params = append(params, typeString(f.Type))
		}
	}
	if !slices.Contains(params, "net.Conn") {
		t.Errorf("EstablishFunc takes %v, no net.Conn", params)
	}
	for _, want := range []string{"*TCP", "*WebSocket", "*Serial"} {
		if serves[want] == nil {
			t.Errorf("no Serve method on %s", want)
		}
	}
	for recv, d := range serves {
		var got []string
		for _, f := range d.Type.Params.List {
			for range max(1, len(f.Names)) {
				got = append(got, typeString(f.Type))
			}
		}
		if !slices.Equal(got, []string{"context.Context", "EstablishFunc"}) {
			t.Errorf("(%s).Serve takes %v, want (context.Context, EstablishFunc)", recv, got)
		}
	}
}

func typeString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return "*" + typeString(e.X)
	case *ast.SelectorExpr:
		return typeString(e.X) + "." + e.Sel.Name
	default:
		return fmt.Sprintf("%T", e)
	}
}
