package packet

import (
	"strings"
	"unicode/utf8"
)

// sharePrefix starts a v5 shared subscription filter, 5.0 §4.8.2.
const sharePrefix = "$share/"

// validString reports whether b is a well-formed MQTT UTF-8 string: valid
// UTF-8 (Go's decoder already rejects overlong forms and the surrogates
// U+D800..U+DFFF) with no U+0000.
//
// [MQTT-1.5.4-1], [MQTT-1.5.3-1](3.1.1): ill-formed UTF-8 and surrogates
// [MQTT-1.5.4-2], [MQTT-1.5.3-2](3.1.1): no U+0000
func validString(b []byte) bool {
	for _, c := range b {
		if c == 0 || c >= utf8.RuneSelf {
			return utf8.Valid(b) && !containsNUL(b)
		}
	}
	return true
}

func containsNUL(b []byte) bool {
	for _, c := range b {
		if c == 0 {
			return true
		}
	}
	return false
}

// ValidTopicName checks a topic name as used in PUBLISH and as a will topic:
// non-empty, at most 65535 bytes, well-formed UTF-8 without U+0000 and no
// wildcard characters. It returns nil or an *Error with code
// TopicNameInvalid. It does not treat the empty name of a v5 PUBLISH that
// carries a topic alias specially; the decoder handles that case.
func ValidTopicName(s string) error {
	if s == "" {
		return Errorf(TopicNameInvalid, "empty topic name") // [MQTT-4.7.3-1]
	}
	if len(s) > 65535 {
		return Errorf(TopicNameInvalid, "topic name longer than 65535 bytes") // [MQTT-4.7.3-3]
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '+', '#':
			return Errorf(TopicNameInvalid, "wildcard %q in topic name", s[i]) // [MQTT-3.3.2-2], [MQTT-4.7.0-1], [MQTT-4.7.1-1](3.1.1)
		case 0:
			return Errorf(TopicNameInvalid, "U+0000 in topic name") // [MQTT-4.7.3-2]
		}
	}
	if !utf8.ValidString(s) {
		return Errorf(TopicNameInvalid, "topic name is not valid UTF-8") // [MQTT-1.5.4-1], [MQTT-1.5.3-1](3.1.1)
	}
	return nil
}

// ValidTopicFilter checks a topic filter as used in SUBSCRIBE and
// UNSUBSCRIBE: non-empty, at most 65535 bytes, well-formed UTF-8 without
// U+0000, '#' only as the whole last level, '+' only as a whole level. A
// shared subscription "$share/{group}/{filter}" needs a non-empty group
// without '+', '#' or '/' and a valid non-empty filter (5.0 §4.8.2). It
// returns nil or an *Error with code TopicFilterInvalid.
func ValidTopicFilter(s string) error {
	if len(s) > 65535 {
		return Errorf(TopicFilterInvalid, "topic filter longer than 65535 bytes") // [MQTT-4.7.3-3]
	}
	if strings.HasPrefix(s, sharePrefix) {
		group, filter, ok := SplitShared(s)
		if !ok {
			return Errorf(TopicFilterInvalid, "shared subscription %q has no topic filter", s) // [MQTT-4.8.2-2]
		}
		if group == "" {
			return Errorf(TopicFilterInvalid, "shared subscription with empty share name") // [MQTT-4.8.2-1]
		}
		if strings.ContainsAny(group, "+#") {
			return Errorf(TopicFilterInvalid, "share name %q contains a wildcard", group) // [MQTT-4.8.2-2]
		}
		s = filter
	}
	if s == "" {
		return Errorf(TopicFilterInvalid, "empty topic filter") // [MQTT-4.7.3-1]
	}
	levelStart := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '/':
			levelStart = i + 1
		case '#':
			// '#' must be the whole last level. [MQTT-4.7.1-1], [MQTT-4.7.1-2](3.1.1)
			if i != levelStart || i != len(s)-1 {
				return Errorf(TopicFilterInvalid, "'#' not alone in the last level of %q", s)
			}
		case '+':
			// '+' must occupy a whole level. [MQTT-4.7.1-2], [MQTT-4.7.1-3](3.1.1)
			if i != levelStart || (i+1 < len(s) && s[i+1] != '/') {
				return Errorf(TopicFilterInvalid, "'+' not alone in a level of %q", s)
			}
		case 0:
			return Errorf(TopicFilterInvalid, "U+0000 in topic filter") // [MQTT-4.7.3-2]
		}
	}
	if !utf8.ValidString(s) {
		return Errorf(TopicFilterInvalid, "topic filter is not valid UTF-8") // [MQTT-1.5.4-1], [MQTT-1.5.3-1](3.1.1)
	}
	return nil
}

// SplitShared splits a shared subscription filter "$share/{group}/{filter}"
// into its share name and topic filter. ok is false when filter does not
// start with "$share/" or has no '/' after the share name; then group is ""
// and filter is returned unchanged. Neither part is validated (see
// ValidTopicFilter).
func SplitShared(filter string) (group, topicFilter string, ok bool) {
	rest, found := strings.CutPrefix(filter, sharePrefix)
	if !found {
		return "", filter, false
	}
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return "", filter, false
	}
	return rest[:i], rest[i+1:], true
}
