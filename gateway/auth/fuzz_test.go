package auth

import (
	"strings"
	"testing"

	"github.com/edgegw/edgegw/gateway/topics"
)

// coversSplit is the matcher as it was before it stopped allocating: the
// reference covers is checked against.
func coversSplit(acl, sub string) bool {
	a, s := strings.Split(acl, "/"), strings.Split(sub, "/")
	for i, al := range a {
		if al == "#" {
			return true
		}
		if i >= len(s) {
			return false
		}
		sl := s[i]
		switch {
		case sl == "#":
			return false
		case al == "+":
			continue
		case sl == "+":
			return false
		case al != sl:
			return false
		}
	}
	return len(s) == len(a)
}

// FuzzCovers checks the ACL matcher: covers agrees with the split-based
// reference for any input, and for a valid filter and topic name
// matchTopic agrees with the broker's own topic matching
// (topics.MatchFilter), so the ACL and the subscription tree never differ
// on which topics a filter reaches ($-topics included).
func FuzzCovers(f *testing.F) {
	for _, c := range [][2]string{
		{"a/#", "a"}, {"a/+", "a/b"}, {"#", "$SYS/x"}, {"+/x", "$SYS/x"}, {"shared/secret/#", "shared/+/x"},
		{"clients/#/#", "clients/bobdev/cmd"}, {"a//b", "a//b"}, {"", ""}, {"/", "/"}, {"a/+/#", "a/b/c/d"},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, acl, sub string) {
		if got, want := covers(acl, sub), coversSplit(acl, sub); got != want {
			t.Fatalf("covers(%q, %q) = %v, reference %v", acl, sub, got, want)
		}
		if topics.ValidFilter(acl) != nil || topics.ValidTopic(sub) != nil {
			return
		}
		if got, want := matchTopic(acl, sub), topics.MatchFilter(acl, sub); got != want {
			t.Fatalf("matchTopic(%q, %q) = %v, topics.MatchFilter %v", acl, sub, got, want)
		}
	})
}

// FuzzSubstitute checks that a client id and a user name can only ever
// grant their owner the subtree named by themselves: under
// "pattern readwrite clients/%c/#" and "pattern read users/%u/#", client
// id c and user u may reach a topic under clients/ or users/ only if its
// second level is literally c or u, whatever characters c and u hold.
func FuzzSubstitute(f *testing.F) {
	for _, c := range [][4]string{
		{"+", "alice", "clients/bobdev/secret", "clients/+/secret"},
		{"#", "alice", "clients/bobdev/cmd", "clients/#"},
		{"a/b", "alice", "clients/a/b/x", "clients/a/#"},
		{"dev1", "+", "users/bob/x", "users/+/x"},
		{"dev1", "", "users//x", "users/#"},
		{"$SYS", "alice", "$SYS/x", "$SYS/#"},
		{"dev1", "alice", "clients/dev1/x", "clients/dev1/#"},
	} {
		f.Add(c[0], c[1], c[2], c[3])
	}
	a, err := parseACL(strings.NewReader("pattern readwrite clients/%c/#\npattern read users/%u/#\npattern readwrite %c/%u/x\n"), "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, clientID, username, topic, filter string) {
		// A name is allowed only inside the client's own subtrees.
		own := func(name string) bool {
			lv := strings.Split(name, "/")
			return len(lv) >= 2 && lv[0] == "clients" && lv[1] == clientID && literalLevel(clientID) ||
				len(lv) >= 2 && lv[0] == "users" && lv[1] == username && literalLevel(username) ||
				len(lv) == 3 && lv[0] == clientID && lv[1] == username && lv[2] == "x" && literalLevel(clientID) && literalLevel(username)
		}
		if topics.ValidTopic(topic) == nil {
			if a.allowed(username, clientID, topic, accessRead) && !own(topic) {
				t.Fatalf("client %q user %q may read %q", clientID, username, topic)
			}
			if a.allowed(username, clientID, topic, accessWrite) && !own(topic) {
				t.Fatalf("client %q user %q may write %q", clientID, username, topic)
			}
		}
		if topics.ValidFilter(filter) == nil && a.allowed(username, clientID, filter, accessRead) && !own(filter) {
			t.Fatalf("client %q user %q may subscribe %q", clientID, username, filter)
		}
		f, applies := substitute("clients/%c/#", username, clientID)
		if applies && (strings.Count(f, "/") != 2 || strings.Count(f, "#") != 1 || strings.Contains(f, "+")) {
			t.Fatalf("substitute of client %q gave %q: the id became more than one literal level", clientID, f)
		}
	})
}

// FuzzParseACL feeds arbitrary ACL files to the parser: it never panics,
// and a file it accepts gives rules whose checks never panic either.
func FuzzParseACL(f *testing.F) {
	for _, s := range []string{
		"topic read $SYS/#\nuser alice\ntopic readwrite shared/#\ntopic deny shared/secret/#\npattern readwrite clients/%c/#\n",
		"user\n", "topic\n", "topic a b c d\n", "# comment\n\n   \n", "pattern deny %u/%c/#\n", "user bob\ntopic write\n",
		"topic readonly a\n", "\x00\n", "user a\nuser b\ntopic #\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		a, err := parseACL(strings.NewReader(body), "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz") && !strings.Contains(err.Error(), "acl file") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, u := range []string{"", "alice", "bob"} {
			a.allowed(u, "dev1", "shared/secret/x", accessRead)
			a.allowed(u, "+", "a/#", accessRead)
		}
	})
}

// FuzzDenyWithheld states the deny contract since a wider filter is
// granted (f723a18): under "topic readwrite #" and "topic deny secret/#",
// a filter that lies inside secret/# is refused at SUBSCRIBE, and every
// topic under secret/ that a granted filter can match is refused per
// message (CanRead), so no filter reaches a denied topic.
func FuzzDenyWithheld(f *testing.F) {
	for _, c := range [][2]string{
		{"#", "secret/x"}, {"+/x", "secret/x"}, {"secret/#", "secret"}, {"+/+/#", "secret/a/b"},
		{"secret/+", "secret/a"}, {"se/#", "se/cret"}, {"+", "secret"},
	} {
		f.Add(c[0], c[1])
	}
	a, err := parseACL(strings.NewReader("topic readwrite #\ntopic deny secret/#\n"), "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, filter, topic string) {
		if topics.ValidFilter(filter) != nil || topics.ValidTopic(topic) != nil {
			return
		}
		inside := topics.MatchFilter("secret/#", topic)
		if inside && a.allowed("u", "c", topic, accessRead) {
			t.Fatalf("%q readable under deny secret/#", topic)
		}
		granted := a.allowed("u", "c", filter, accessRead)
		if granted && covers("secret/#", filter) {
			t.Fatalf("filter %q lies inside secret/# and was granted", filter)
		}
		if granted && topics.MatchFilter(filter, topic) && !inside && !strings.HasPrefix(topic, "$") && !a.allowed("u", "c", topic, accessRead) {
			t.Fatalf("granted filter %q matches %q, which is outside the deny and yet refused", filter, topic)
		}
	})
}
