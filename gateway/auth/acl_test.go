package auth

import (
	"strings"
	"testing"
)

// TestACLTrailingComment: a "#" comment after a rule is refused with an
// error that names the file and line and says why, rather than read as
// part of the rule or silently dropped ('#' is also the MQTT wildcard, so
// neither reading is safe). A '#' where the rule's filter ends is the
// wildcard and stays accepted.
func TestACLTrailingComment(t *testing.T) {
	for _, c := range []struct {
		name, line string
		want       string // "" = accepted
	}{
		{"after topic with access", "topic readwrite sensors/# # the sensors",
			`acl:2: trailing comment "# the sensors": a comment must be on its own line`},
		{"after topic without access", "topic sensors/+/temp #temperatures",
			`acl:2: trailing comment "#temperatures"`},
		{"lone # after the filter", "topic read sensors/# #",
			`acl:2: trailing comment "#"`},
		{"after pattern", "pattern write devices/%c/# # own subtree",
			`acl:2: trailing comment "# own subtree"`},
		{"after user", "user alice # the admin",
			`acl:2: trailing comment "# the admin"`},
		{"comment glued to the filter", "topic read sensors/#comment",
			`acl:2: filter "sensors/#comment": misplaced wildcard in filter (a comment goes on its own line)`},
		{"+ inside a level", "topic read sensors/a+b",
			`acl:2: filter "sensors/a+b": misplaced wildcard in filter`},
		{"# not last", "topic read #/x",
			`acl:2: filter "#/x": misplaced wildcard in filter`},
		{"# as the filter", "topic #", ""},
		{"# as the filter with access", "topic deny #", ""},
		{"# as the last level", "topic read sensors/#", ""},
		{"comment line", "  # topic read a", ""},
		{"user name starting with #", "user #ops", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseACL(strings.NewReader("topic read public/#\n"+c.line+"\n"), "acl")
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
				t.Fatalf("error %v, want it to start %q", err, c.want)
			}
		})
	}
}

// TestACLFilterKeepsItsWildcard: a filter accepted next to the trailing
// comment check still grants what it says.
func TestACLFilterKeepsItsWildcard(t *testing.T) {
	a, err := parseACL(strings.NewReader("topic read sensors/#\ntopic write #\n"), "acl")
	if err != nil {
		t.Fatal(err)
	}
	if !a.allowed("", "c", "sensors/a/b", accessRead) || !a.allowed("", "c", "any/topic", accessWrite) ||
		a.allowed("", "c", "any/topic", accessRead) {
		t.Fatal("rules do not grant what they say")
	}
}
