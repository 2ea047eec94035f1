package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPasswordFile(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "passwd")
	if err := SetPassword(pw, "alice", []byte("s3cret")); err != nil {
		t.Fatal(err)
	}
	if err := SetPassword(pw, "bob", []byte("hunter2")); err != nil {
		t.Fatal(err)
	}
	if err := SetPassword(pw, "alice", []byte("changed")); err != nil { // replaces
		t.Fatal(err)
	}
	b, _ := os.ReadFile(pw)
	if n := strings.Count(string(b), "alice:"); n != 1 {
		t.Fatalf("alice appears %d times:\n%s", n, b)
	}
	f := &Files{PasswordFile: pw}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, user, pass string
		hasPass          bool
		cn               string
		ok               bool
	}{
		{"right password", "alice", "changed", true, "", true},
		{"old password", "alice", "s3cret", true, "", false},
		{"other user", "bob", "hunter2", true, "", true},
		{"wrong password", "bob", "nope", true, "", false},
		{"unknown user", "carol", "x", true, "", false},
		{"no password", "bob", "", false, "", false},
		{"cert cn as user", "device-7", "", false, "device-7", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := f.Authenticate("cid", c.user, []byte(c.pass), c.hasPass, c.cn)
			if (err == nil) != c.ok {
				t.Fatalf("Authenticate = %v, want ok=%v", err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrBadCredentials) {
				t.Fatalf("error %v is not ErrBadCredentials", err)
			}
		})
	}
}

func TestPasswordFileErrorsNameTheLine(t *testing.T) {
	p := writeFile(t, "passwd", "# users\nalice:notahash\n")
	f := &Files{PasswordFile: p}
	err := f.Load()
	if err == nil || !strings.Contains(err.Error(), ":2:") || !strings.Contains(err.Error(), "alice") {
		t.Fatalf("err = %v, want it to name line 2 and the user", err)
	}
}

func TestReloadKeepsOldRulesOnError(t *testing.T) {
	p := writeFile(t, "acl", "topic read a/#\n")
	f := &Files{ACLFile: p}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, []byte("bogus line\n"), 0o600)
	if err := f.Load(); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("reload err = %v", err)
	}
	if !f.CanSubscribe("", "c", "a/b") {
		t.Fatal("old rules lost after a failed reload")
	}
}

func TestACL(t *testing.T) {
	p := writeFile(t, "acl", `
# anonymous
topic read public/#
user alice
topic readwrite sensors/#
topic deny sensors/secret/#
topic write cmd/alice
pattern readwrite devices/%c/#
pattern read users/%u/inbox
`)
	f := &Files{ACLFile: p}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	type op struct {
		user, client, name string
		sub                bool
		want               bool
	}
	cases := map[string]op{
		"anon reads public":            {"", "c1", "public/x", true, true},
		"anon cannot write public":     {"", "c1", "public/x", false, false},
		"anon cannot read sensors":     {"", "c1", "sensors/t", true, false},
		"alice writes sensors":         {"alice", "c1", "sensors/t", false, true},
		"alice subscribes sensors/+":   {"alice", "c1", "sensors/+", true, true},
		"alice denied secret":          {"alice", "c1", "sensors/secret/k", false, false},
		"alice sub sensors/# granted":  {"alice", "c1", "sensors/#", true, true}, // its secret topics are withheld per message
		"alice sub inside the deny":    {"alice", "c1", "sensors/secret/#", true, false},
		"alice sub one denied topic":   {"alice", "c1", "sensors/secret/k", true, false},
		"alice write-only cmd":         {"alice", "c1", "cmd/alice", false, true},
		"alice cannot read cmd":        {"alice", "c1", "cmd/alice", true, false},
		"pattern client id":            {"bob", "dev9", "devices/dev9/state", false, true},
		"pattern other client":         {"bob", "dev9", "devices/dev8/state", false, false},
		"pattern user":                 {"bob", "x", "users/bob/inbox", true, true},
		"pattern user wildcard denied": {"bob", "x", "users/+/inbox", true, false},
		"no rule no access":            {"bob", "x", "other", false, false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var got bool
			if c.sub {
				got = f.CanSubscribe(c.user, c.client, c.name)
			} else {
				got = f.CanPublish(c.user, c.client, c.name)
			}
			if got != c.want {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestACLErrors(t *testing.T) {
	for name, body := range map[string]string{
		"unknown directive": "topik read a\n",
		"bad access":        "topic readonly a\n",
		"user without name": "user\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := &Files{ACLFile: writeFile(t, "acl", body)}
			if err := f.Load(); err == nil || !strings.Contains(err.Error(), ":1:") {
				t.Fatalf("err = %v, want a line-numbered error", err)
			}
		})
	}
}

func TestCovers(t *testing.T) {
	for _, c := range []struct {
		acl, sub string
		want     bool
	}{
		{"a/#", "a", true}, {"a/#", "a/b/c", true}, {"a/+", "a/b", true}, {"a/+", "a/b/c", false},
		{"a/+", "a/#", false}, {"#", "x/#", true}, {"a/b", "a/+", false}, {"+/b", "a/b", true},
	} {
		if got := covers(c.acl, c.sub); got != c.want {
			t.Errorf("covers(%q, %q) = %v, want %v", c.acl, c.sub, got, c.want)
		}
	}
}

// TestACLIssue13 is the ACL of issue 13 with the checks docs/security.md
// states: per-topic reads under an allowed wildcard, literal %u/%c.
func TestACLIssue13(t *testing.T) {
	f := &Files{ACLFile: writeFile(t, "acl", `topic read $SYS/#
user alice
topic readwrite shared/#
topic deny shared/secret/#
topic readwrite alice/#
user bob
topic readwrite bob/#
topic bobplain/#
user ops
topic readwrite #
pattern readwrite clients/%c/#
pattern read users/%u/inbox
`)}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	type op struct {
		kind, user, client, name string
		want                     bool
	}
	for name, c := range map[string]op{
		"alice may subscribe shared/+/x":          {"sub", "alice", "a1", "shared/+/x", true},
		"alice reads shared/public/x":             {"read", "alice", "a1", "shared/public/x", true},
		"alice does not read shared/secret/x":     {"read", "alice", "a1", "shared/secret/x", false},
		"alice may subscribe shared/#":            {"sub", "alice", "a1", "shared/#", true}, // shared/secret/... withheld per message
		"alice may not subscribe shared/secret/#": {"sub", "alice", "a1", "shared/secret/#", false},
		"alice may not subscribe shared/secret/+": {"sub", "alice", "a1", "shared/secret/+", false},
		"anonymous reads $SYS":                    {"read", "", "x", "$SYS/broker/uptime", true},
		"anonymous writes nothing":                {"pub", "", "x", "$SYS/broker/uptime", false},
		"bob reads no $SYS (rules are per user)":  {"read", "bob", "x", "$SYS/broker/uptime", false},
		"client reads own subtree":                {"read", "alice", "alicedev", "clients/alicedev/x", true},
		"client id + reads no other subtree":      {"read", "alice", "+", "clients/bobdev/secret", false},
		"client id + subscribes no other subtree": {"sub", "alice", "+", "clients/+/secret", false},
		"client id # writes no other subtree":     {"pub", "alice", "#", "clients/bobdev/cmd", false},
		"client id a/b writes not into a's":       {"pub", "alice", "a/b", "clients/a/b/x", false},
		"client id $SYS gets no $SYS":             {"read", "bob", "$SYS", "clients/$SYS/x", false},
		"user + reads no other inbox":             {"read", "+", "x", "users/bob/inbox", false},
		"user reads own inbox":                    {"read", "bob", "x", "users/bob/inbox", true},
		"no access word reads":                    {"read", "bob", "x", "bobplain/a", true},
		"no access word writes":                   {"pub", "bob", "x", "bobplain/a", true},
		"# reaches every topic":                   {"read", "ops", "x", "any/topic", true},
		"# does not reach $SYS":                   {"read", "ops", "x", "$SYS/broker/uptime", false},
		"# does not grant subscribing $SYS/#":     {"sub", "ops", "x", "$SYS/#", false},
		"anonymous has no %u inbox":               {"read", "", "x", "users//inbox", false},
	} {
		t.Run(name, func(t *testing.T) {
			var got bool
			switch c.kind {
			case "sub":
				got = f.CanSubscribe(c.user, c.client, c.name)
			case "read":
				got = f.CanRead(c.user, c.client, c.name)
			case "pub":
				got = f.CanPublish(c.user, c.client, c.name)
			}
			if got != c.want {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

// TestGenerationChangesOnlyOnSuccessfulLoad: the gateway's cached read
// verdicts are dropped exactly when new rules are in force.
func TestGenerationChangesOnlyOnSuccessfulLoad(t *testing.T) {
	p := writeFile(t, "acl", "topic read a/#\n")
	f := &Files{ACLFile: p}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	g1 := f.Generation()
	os.WriteFile(p, []byte("bogus\n"), 0o600)
	if f.Load() == nil || f.Generation() != g1 {
		t.Fatalf("a failed load changed the generation %d -> %d", g1, f.Generation())
	}
	os.WriteFile(p, []byte("topic read b/#\n"), 0o600)
	if err := f.Load(); err != nil || f.Generation() == g1 {
		t.Fatalf("a successful load kept generation %d (err %v)", g1, err)
	}
	if f.CanRead("", "c", "a/x") || !f.CanRead("", "c", "b/x") {
		t.Fatal("new rules not in force")
	}
}

func TestCoversDoesNotAllocate(t *testing.T) {
	if a := testing.AllocsPerRun(100, func() { covers("sensors/+/temp/#", "sensors/dev42/temp") }); a != 0 {
		t.Fatalf("covers allocates %v times", a)
	}
}

// TestSetPasswordRefusesUnreadableNames: a user name the password file's
// reader would take for a comment ('#') or trim (a leading space) could
// never log in, so SetPassword (edgegw passwd) refuses it and leaves the
// file alone; a name with '#' or a space inside is fine.
func TestSetPasswordRefusesUnreadableNames(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "passwd")
	for _, name := range []string{"#x", "# x", " bob", "\tbob"} {
		if err := SetPassword(pw, name, []byte("pw")); err == nil {
			t.Errorf("user %q accepted", name)
		}
	}
	if _, err := os.Stat(pw); !os.IsNotExist(err) {
		t.Fatalf("a refused name wrote the file: %v", err)
	}
	for _, name := range []string{"a#b", "bob smith"} {
		if err := SetPassword(pw, name, []byte("pw")); err != nil {
			t.Fatalf("user %q: %v", name, err)
		}
	}
	users, err := ReadPasswordFile(pw)
	if err != nil || len(users) != 2 || users["a#b"] == nil || users["bob smith"] == nil {
		t.Fatalf("read back %v, %v", users, err)
	}
}
