package auth

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/edgegw/edgegw/gateway/topics"
)

// The ACL file, in the spirit of mosquitto's:
//
//	# rules before any "user" line apply to anonymous clients
//	topic read $SYS/#
//	user alice
//	topic readwrite sensors/#
//	topic deny sensors/secret/#
//	# pattern rules apply to everyone; %u = user name, %c = client id
//	pattern write devices/%c/#
//
// Access is read, write, readwrite or deny. A deny rule that matches wins
// over any allow rule; no matching rule means not allowed.

type access int

const (
	accessRead access = 1 << iota
	accessWrite
	accessDeny
)

type aclRule struct {
	filter string
	access access
}

type acl struct {
	anonymous []aclRule
	users     map[string][]aclRule
	patterns  []aclRule
}

func readACL(path string) (*acl, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("acl file: %w", err)
	}
	defer fh.Close()
	return parseACL(fh, path)
}

// parseACL reads ACL rules from r; path names the file in errors.
func parseACL(r io.Reader, path string) (*acl, error) {
	a := &acl{users: make(map[string][]aclRule)}
	user, inUser := "", false
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		bad := func(msg string) error { return fmt.Errorf("%s:%d: %s", path, n, msg) }
		switch f[0] {
		case "user":
			if len(f) > 2 && strings.HasPrefix(f[2], "#") {
				return nil, bad(trailingComment(f[2:]))
			}
			if len(f) != 2 {
				return nil, bad("want: user <name>")
			}
			user, inUser = f[1], true
		case "topic", "pattern":
			// The rule is "topic [ACCESS] FILTER": nf fields.
			nf := 2
			acc, accOK := accessWord(f[1:])
			if accOK && len(f) >= 3 {
				nf = 3
			}
			if len(f) > nf && strings.HasPrefix(f[nf], "#") {
				return nil, bad(trailingComment(f[nf:]))
			}
			if len(f) == 3 && nf == 2 {
				return nil, bad(fmt.Sprintf("access %q: want read, write, readwrite or deny", f[1]))
			}
			if len(f) < 2 || len(f) > nf {
				return nil, bad("want: " + f[0] + " [read|write|readwrite|deny] <filter>")
			}
			if nf == 2 {
				acc = accessRead | accessWrite
			}
			filter := f[nf-1]
			if msg := badFilter(filter); msg != "" {
				return nil, bad(fmt.Sprintf("filter %q: %s", filter, msg))
			}
			r := aclRule{filter: filter, access: acc}
			switch {
			case f[0] == "pattern":
				a.patterns = append(a.patterns, r)
			case inUser:
				a.users[user] = append(a.users[user], r)
			default:
				a.anonymous = append(a.anonymous, r)
			}
		default:
			return nil, bad(fmt.Sprintf("unknown directive %q (want user, topic or pattern)", f[0]))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("acl file %s: %w", path, err)
	}
	return a, nil
}

// accessWord parses the access word that may start a topic or pattern
// rule's arguments.
func accessWord(args []string) (access, bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "read":
		return accessRead, true
	case "write":
		return accessWrite, true
	case "readwrite":
		return accessRead | accessWrite, true
	case "deny":
		return accessDeny, true
	}
	return 0, false
}

// trailingComment is the error for "# ..." after a complete rule. It is
// refused rather than ignored: '#' is also the MQTT multi-level wildcard,
// so "topic # comment" or "topic a/ #" cannot be read one way for sure,
// and an ACL that means something other than what its author read is a
// security hole.
func trailingComment(rest []string) string {
	return fmt.Sprintf("trailing comment %q: a comment must be on its own line starting with # "+
		"(on a rule line # is the MQTT wildcard)", strings.Join(rest, " "))
}

// badFilter says what is wrong with an ACL rule's MQTT filter, or "" when
// it is valid (topics.ValidFilter: '+' and '#' stand only as a whole
// level, '#' only as the last). An invalid filter matches no topic the way
// its author meant; "a/#note" is usually a comment written without its
// space, so that case says so.
func badFilter(filter string) string {
	err := topics.ValidFilter(filter)
	if err == nil {
		return ""
	}
	msg := strings.TrimPrefix(err.Error(), "topics: ")
	for _, level := range strings.Split(filter, "/") {
		if len(level) > 1 && level[0] == '#' {
			msg += " (a comment goes on its own line)"
			break
		}
	}
	return msg
}

// allowed checks name (a topic, or a subscription filter)
// against the rules that apply to the client.
func (a *acl) allowed(username, clientID, name string, want access) bool {
	rules := a.anonymous
	if username != "" {
		rules = a.users[username]
	}
	ok := false
	// A deny rule refuses a subscription that lies inside it. A wider one
	// that also reaches denied topics ("#" next to "deny secret/#") is
	// granted: the check of every delivered message withholds those
	// topics (gateway, security.md). mosquitto (2.0, acl_file) grants it
	// too, so an ACL written for it behaves the same, a dashboard on "#" works,
	// and the Paho interoperability suite's ACL ("#" and one denied
	// topic) serves all its scenarios in one run.
	check := func(filter string, acc access) bool {
		if !matchTopic(filter, name) {
			return true
		}
		if acc&accessDeny != 0 {
			return false
		}
		if acc&want != 0 {
			ok = true
		}
		return true
	}
	for _, r := range rules {
		if !check(r.filter, r.access) {
			return false
		}
	}
	for _, r := range a.patterns {
		f, applies := substitute(r.filter, username, clientID)
		if !applies {
			continue
		}
		if !check(f, r.access) {
			return false
		}
	}
	return ok
}

// substitute puts the user name for %u and the client id for %c into a
// pattern rule's filter. A substituted value is one literal topic level:
// it never acts as a wildcard and never spans levels. So a value that
// contains '+', '#' or '/' (which no single level of a topic name can equal
// literally), starts with '$' (which would reach the broker's namespaces
// when substituted first) or is empty (%u of an anonymous client, as in
// mosquitto) makes the rule not apply to that client: it grants nothing
// and denies nothing. Without this, client id "#" turned
// "clients/%c/#" into "clients/#/#", every client's subtree (issue 13).
func substitute(filter, username, clientID string) (string, bool) {
	if !strings.Contains(filter, "%") {
		return filter, true
	}
	if strings.Contains(filter, "%u") && !literalLevel(username) {
		return "", false
	}
	if strings.Contains(filter, "%c") && !literalLevel(clientID) {
		return "", false
	}
	return strings.ReplaceAll(strings.ReplaceAll(filter, "%u", username), "%c", clientID), true
}

// literalLevel reports whether v can stand for itself as one topic level.
func literalLevel(v string) bool {
	return v != "" && v[0] != '$' && !strings.ContainsAny(v, "+#/")
}

// matchTopic reports whether MQTT filter matches topic, or, when topic is
// itself a filter, every topic it matches. [MQTT-4.7.2-1] applies to both:
// a rule starting with a wildcard reaches no $-topic, so "topic read #"
// neither delivers nor lets one subscribe to $SYS/#.
func matchTopic(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	return covers(filter, topic)
}

// covers reports whether every topic matched by sub is matched by acl
// (a topic name is a filter without wildcards). It does not allocate: it
// runs for every publish and for every delivery the read cache misses.
func covers(acl, sub string) bool {
	for {
		al, arest, amore := strings.Cut(acl, "/")
		if al == "#" {
			return true
		}
		sl, srest, smore := strings.Cut(sub, "/")
		switch {
		case sl == "#":
			return false // sub reaches deeper than a non-# acl level
		case al == "+":
		case sl == "+":
			return false
		case al != sl:
			return false
		}
		if !smore {
			// sub ends here: covered if acl ends too, or continues with
			// "#", which also matches its parent level ("a/#" covers "a").
			next, _, _ := strings.Cut(arest, "/")
			return !amore || next == "#"
		}
		if !amore {
			return false // sub is longer
		}
		acl, sub = arest, srest
	}
}
