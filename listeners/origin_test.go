package listeners

import "testing"

func TestOriginAllowed(t *testing.T) {
	for _, tc := range []struct {
		allowed []string
		origin  string
		want    bool
	}{
		// No list: same origin only (the request's Host is gw.local:8083).
		{nil, "https://any.example", false},
		{nil, "http://gw.local:8083", true},
		{nil, "https://GW.local:8083", true},
		{nil, "http://gw.local", false},
		{nil, "http://gw.local:8084", false},
		{nil, "null", false},
		{[]string{"*"}, "https://any.example", true},
		{[]string{"https://a.example"}, "https://a.example", true},
		{[]string{"https://a.example"}, "https://A.Example", true},
		{[]string{"https://a.example"}, "https://a.example:8443", false},
		{[]string{"https://a.example:*"}, "https://a.example:8443", true},
		{[]string{"https://*.a.example"}, "https://x.y.a.example", true},
		{[]string{"https://*.a.example"}, "https://a.example", false},
		{[]string{"https://*.a.example"}, "https://evil.example/.a.example", true}, // '*' spans anything; origins carry no path
		{[]string{"https://*.a.example"}, "https://x.a.example.evil", false},
		{[]string{"http://localhost:*", "https://b.example"}, "https://b.example", true},
		{[]string{"**x"}, "x", true},
		{[]string{"a*b*c"}, "aXbYbZc", true},
		{[]string{"a*b*c"}, "aXbYbZ", false},
	} {
		if got := originAllowed(tc.allowed, tc.origin, "gw.local:8083"); got != tc.want {
			t.Errorf("originAllowed(%q, %q) = %v, want %v", tc.allowed, tc.origin, got, tc.want)
		}
	}
}
