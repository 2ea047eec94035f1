// Package topics implements MQTT topic matching for the broker: a
// subscription trie ([Tree]) walked on every publish, a retained-message
// store ([Retained]) queried by a filter on every subscribe, and a plain
// reference matcher ([MatchFilter]) for one-off checks such as bridge topic
// rules.
//
// All three share one set of rules (MQTT 3.1.1 section 4.7, MQTT 5.0
// section 4.7):
//
//   - Topic names and filters are split into levels on '/'. Empty levels are
//     real levels: "a//b" has three levels, "/a" has two (the first empty).
//   - A filter level that is exactly "+" matches exactly one topic level,
//     including an empty one.
//   - A filter level that is exactly "#" and is the last level matches its
//     parent level and any number of child levels: "a/#" matches "a", "a/b"
//     and "a/b/c"; "#" alone matches every topic.
//   - Topics whose name starts with '$' are not matched by filters whose
//     first level is "+" or "#" [MQTT-4.7.2-1].
//
// The matchers do not validate their input: a "+" or "#" that is not a whole
// level ("a+", "a#b"), or a "#" that is not the last level ("#/a"), is
// compared as literal text. The broker rejects such filters at SUBSCRIBE
// time with [ValidFilter], and wildcard characters in a PUBLISH topic with
// [ValidTopic], before they ever reach a Tree. Shared-subscription prefixes
// ("$share/group/") are the caller's business: strip them before Add and
// encode the group in the key.
package topics

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// Errors returned by [ValidFilter] and [ValidTopic].
var (
	// ErrEmpty reports a zero-length topic name or filter [MQTT-4.7.3-1].
	ErrEmpty = errors.New("topics: empty topic or filter")
	// ErrWildcardInTopic reports '+' or '#' in a topic name [MQTT-3.3.2-2].
	ErrWildcardInTopic = errors.New("topics: wildcard in topic name")
	// ErrBadWildcard reports a '+' or '#' that is not a whole level, or a
	// '#' that is not the last level [MQTT-4.7.1-1] [MQTT-4.7.1-2].
	ErrBadWildcard = errors.New("topics: misplaced wildcard in filter")
	// ErrNullChar reports U+0000 in a topic name or filter [MQTT-4.7.3-2].
	ErrNullChar = errors.New("topics: null character")
	// ErrTooLong reports a topic name or filter longer than 65535 bytes
	// [MQTT-4.7.3-3].
	ErrTooLong = errors.New("topics: longer than 65535 bytes")
	// ErrBadUTF8 reports a topic name or filter that is not valid UTF-8
	// [MQTT-1.5.4-1], [MQTT-1.5.3-1](3.1.1).
	ErrBadUTF8 = errors.New("topics: invalid UTF-8")
)

// MatchFilter reports whether the topic name matches the subscription
// filter under the MQTT rules described in the package documentation.
// It does not allocate. It is the reference implementation that [Tree] and
// [Retained] are tested against.
func MatchFilter(filter, topic string) bool {
	dollar := len(topic) > 0 && topic[0] == '$'
	fDone, tDone := false, false // no levels left
	for i := 0; ; i++ {
		if fDone {
			return tDone
		}
		var fl, tl string
		fl, filter, fDone = cutLevel(filter)
		if fl == "#" && fDone {
			// Matches the parent level and everything below it.
			return !(i == 0 && dollar) // [MQTT-4.7.2-1]
		}
		if tDone {
			return false
		}
		tl, topic, tDone = cutLevel(topic)
		if fl == "+" {
			if i == 0 && dollar { // [MQTT-4.7.2-1]
				return false
			}
			continue
		}
		if fl != tl {
			return false
		}
	}
}

// cutLevel splits s at its first '/': level is the text before it, rest the
// text after it, and last is true when s has no '/' (level is all of s).
func cutLevel(s string) (level, rest string, last bool) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:], false
	}
	return s, "", true
}

// ValidTopic checks a topic name from a PUBLISH packet (or a will topic):
// non-empty, at most 65535 bytes, valid UTF-8, no U+0000 and no wildcard
// characters.
func ValidTopic(topic string) error {
	if err := validCommon(topic); err != nil {
		return err
	}
	if strings.ContainsAny(topic, "+#") { // [MQTT-3.3.2-2]
		return ErrWildcardInTopic
	}
	return nil
}

// ValidFilter checks a topic filter from a SUBSCRIBE or UNSUBSCRIBE packet:
// non-empty, at most 65535 bytes, valid UTF-8, no U+0000, every '+' a whole
// level and '#' only as the whole last level.
func ValidFilter(filter string) error {
	if err := validCommon(filter); err != nil {
		return err
	}
	for rest, last := filter, false; !last; {
		var lvl string
		lvl, rest, last = cutLevel(rest)
		switch {
		case lvl == "+":
		case lvl == "#":
			if !last { // [MQTT-4.7.1-1]
				return ErrBadWildcard
			}
		case strings.ContainsAny(lvl, "+#"): // [MQTT-4.7.1-1] [MQTT-4.7.1-2]
			return ErrBadWildcard
		}
	}
	return nil
}

func validCommon(s string) error {
	switch {
	case s == "": // [MQTT-4.7.3-1]
		return ErrEmpty
	case len(s) > 65535: // [MQTT-4.7.3-3]
		return ErrTooLong
	case strings.IndexByte(s, 0) >= 0: // [MQTT-4.7.3-2]
		return ErrNullChar
	case !utf8.ValidString(s): // [MQTT-1.5.4-1], [MQTT-1.5.3-1](3.1.1)
		return ErrBadUTF8
	}
	return nil
}
