package topics

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// matchCases is the rule table shared by MatchFilter, Tree and Retained.
var matchCases = []struct {
	name          string
	filter, topic string
	want          bool
}{
	{"exact", "a/b/c", "a/b/c", true},
	{"exact differs", "a/b/c", "a/b/d", false},
	{"filter longer", "a/b/c", "a/b", false},
	{"topic longer", "a/b", "a/b/c", false},
	{"case sensitive", "A/b", "a/b", false},
	{"plus one level", "a/+/c", "a/b/c", true},
	{"plus not two levels", "a/+/c", "a/b/x/c", false},
	{"plus last", "a/+", "a/b", true},
	{"plus needs a level", "a/+", "a", false},
	{"plus matches empty level", "a/+/c", "a//c", true},
	{"plus matches empty last level", "a/+", "a/", true},
	{"plus alone", "+", "a", true},
	{"plus alone not two levels", "+", "a/b", false},
	{"plus alone empty topic level", "+", "", true},
	{"plus plus slash", "+/+", "/a", true},
	{"plus slash topic", "+/+", "/", true},
	{"plus x", "+/x", "a/x", true},
	{"plus x other", "+/x", "a/y", false},
	{"hash alone", "#", "a/b/c", true},
	{"hash alone one level", "#", "a", true},
	{"hash alone slash", "#", "/", true},
	{"hash alone leading slash", "#", "/a", true},
	{"hash matches parent", "a/#", "a", true},
	{"hash child", "a/#", "a/b", true},
	{"hash grandchild", "a/#", "a/b/c", true},
	{"hash empty child", "a/#", "a/", true},
	{"hash not sibling", "a/#", "ab", false},
	{"hash not grandparent", "a/b/#", "a", false},
	{"plus then hash", "+/#", "a", true},
	{"plus then hash deep", "a/+/#", "a/b/c/d", true},
	{"plus then hash parent", "a/+/#", "a/b", true},
	{"plus then hash needs level", "a/+/#", "a", false},
	{"dollar vs hash", "#", "$SYS/x", false},
	{"dollar vs hash one level", "#", "$SYS", false},
	{"dollar vs plus", "+/x", "$SYS/x", false},
	{"dollar vs plus hash", "+/#", "$SYS/x", false},
	{"dollar vs plus alone", "+", "$SYS", false},
	{"dollar explicit hash", "$SYS/#", "$SYS/broker/uptime", true},
	{"dollar explicit hash parent", "$SYS/#", "$SYS", true},
	{"dollar explicit plus", "$SYS/+/uptime", "$SYS/broker/uptime", true},
	{"dollar exact", "$SYS/x", "$SYS/x", true},
	{"dollar later level ok", "a/+", "a/$x", true},
	{"dollar later level hash ok", "a/#", "a/$x/y", true},
	{"dollar not first char", "#", "a$/b", true},
	{"leading slash exact", "/a", "/a", true},
	{"leading slash vs none", "/a", "a", false},
	{"trailing slash exact", "a/", "a/", true},
	{"trailing slash vs none", "a/", "a", false},
	{"double slash", "a//b", "a//b", true},
	{"double slash vs single", "a//b", "a/b", false},
	{"slash exact", "/", "/", true},
	{"plus first empty", "+/a", "/a", true},
	{"share prefix is literal", "$share/g/a", "a", false},
	// Invalid filters: wildcards that are not whole levels are literal.
	{"literal a+", "a+", "a+", true},
	{"literal a+ not wild", "a+", "ab", false},
	{"literal hash not last", "#/a", "#/a", true},
	{"literal hash not last not wild", "#/a", "b/a", false},
}

func TestMatchFilter(t *testing.T) {
	for _, tc := range matchCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := MatchFilter(tc.filter, tc.topic); got != tc.want {
				t.Errorf("MatchFilter(%q, %q) = %v, want %v", tc.filter, tc.topic, got, tc.want)
			}
		})
	}
}

func TestTreeMatchRules(t *testing.T) {
	for _, tc := range matchCases {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTree[int]()
			tr.Add(tc.filter, "c", 1)
			var got []string
			tr.Match(tc.topic, func(filter, key string, v int) {
				got = append(got, filter+"|"+key)
			})
			want := 0
			if tc.want {
				want = 1
			}
			if len(got) != want || (want == 1 && got[0] != tc.filter+"|c") {
				t.Errorf("Tree{%q}.Match(%q) = %q, want match=%v", tc.filter, tc.topic, got, tc.want)
			}
		})
	}
}

func TestRetainedMatchRules(t *testing.T) {
	for _, tc := range matchCases {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRetained[int]()
			r.Set(tc.topic, 7)
			var got []string
			r.Match(tc.filter, func(topic string, v int) {
				if v != 7 {
					t.Errorf("value %d", v)
				}
				got = append(got, topic)
			})
			want := 0
			if tc.want {
				want = 1
			}
			if len(got) != want || (want == 1 && got[0] != tc.topic) {
				t.Errorf("Retained{%q}.Match(%q) = %q, want match=%v", tc.topic, tc.filter, got, tc.want)
			}
		})
	}
}

// TestTreeMatchMany checks a tree holding every filter of the table at once,
// with several keys per filter.
func TestTreeMatchMany(t *testing.T) {
	tr := NewTree[string]()
	keys := []string{"c1", "c2", "$share-like/g/c3"}
	for _, tc := range matchCases {
		for _, k := range keys {
			tr.Add(tc.filter, k, tc.filter+"#"+k)
		}
	}
	topics := map[string]bool{}
	for _, tc := range matchCases {
		topics[tc.topic] = true
	}
	for topic := range topics {
		var got, want []string
		tr.Match(topic, func(filter, key string, v string) {
			if v != filter+"#"+key {
				t.Errorf("value %q for (%q,%q)", v, filter, key)
			}
			got = append(got, filter+"|"+key)
		})
		seen := map[string]bool{}
		for _, tc := range matchCases {
			if !seen[tc.filter] && MatchFilter(tc.filter, topic) {
				for _, k := range keys {
					want = append(want, tc.filter+"|"+k)
				}
			}
			seen[tc.filter] = true
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("Match(%q):\n got %q\nwant %q", topic, got, want)
		}
	}
}

func TestTreeAddRemove(t *testing.T) {
	tr := NewTree[int]()
	if tr.Add("a/+", "c1", 1) {
		t.Fatal("first Add reported replaced")
	}
	if !tr.Add("a/+", "c1", 2) {
		t.Fatal("second Add did not report replaced")
	}
	tr.Add("a/+", "c2", 3)
	tr.Add("a/#", "c1", 4)
	if tr.Len() != 3 {
		t.Fatalf("Len = %d, want 3", tr.Len())
	}
	got := map[string]int{}
	tr.Match("a/b", func(f, k string, v int) { got[f+"|"+k] = v })
	want := map[string]int{"a/+|c1": 2, "a/+|c2": 3, "a/#|c1": 4}
	if len(got) != len(want) {
		t.Fatalf("Match = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("Match = %v, want %v", got, want)
		}
	}
	for _, c := range []struct {
		filter, key string
		want        bool
	}{
		{"a/+", "c3", false}, {"a/b", "c1", false}, {"a", "c1", false}, {"a/+/x", "c1", false},
		{"a/+", "c1", true}, {"a/+", "c1", false}, {"a/#", "c1", true}, {"a/+", "c2", true},
	} {
		if got := tr.Remove(c.filter, c.key); got != c.want {
			t.Errorf("Remove(%q,%q) = %v, want %v", c.filter, c.key, got, c.want)
		}
	}
	if tr.Len() != 0 || tr.nodeCount() != 0 {
		t.Fatalf("after removing all: Len %d nodes %d", tr.Len(), tr.nodeCount())
	}
	var zero Tree[int] // the zero value works
	zero.Add("x", "k", 1)
	if zero.Len() != 1 {
		t.Fatal("zero Tree unusable")
	}
}

// TestTreeManyKeysOneFilter exercises the key index of a busy filter.
func TestTreeManyKeysOneFilter(t *testing.T) {
	tr := NewTree[int]()
	const n = 1000
	for i := range n {
		tr.Add("news/#", key(i), i)
	}
	for i := 0; i < n; i += 2 {
		if !tr.Remove("news/#", key(i)) {
			t.Fatalf("Remove %d failed", i)
		}
	}
	for i := 1; i < n; i += 4 {
		if !tr.Add("news/#", key(i), -i) {
			t.Fatalf("re-Add %d did not replace", i)
		}
	}
	got := map[string]int{}
	tr.Match("news/x", func(_, k string, v int) { got[k] = v })
	if len(got) != n/2 || tr.Len() != n/2 {
		t.Fatalf("got %d matches, Len %d, want %d", len(got), tr.Len(), n/2)
	}
	for i := 1; i < n; i += 2 {
		want := i
		if (i-1)%4 == 0 {
			want = -i
		}
		if got[key(i)] != want {
			t.Fatalf("key %d = %d, want %d", i, got[key(i)], want)
		}
	}
	for i := 1; i < n; i += 2 {
		tr.Remove("news/#", key(i))
	}
	if tr.Len() != 0 || tr.nodeCount() != 0 {
		t.Fatalf("Len %d nodes %d", tr.Len(), tr.nodeCount())
	}
}

func key(i int) string { return "client-" + itoa(i) }

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	p := len(b)
	for ; i > 0; i /= 10 {
		p--
		b[p] = byte('0' + i%10)
	}
	return string(b[p:])
}

// TestTreePrune: memory follows live subscriptions.
func TestTreePrune(t *testing.T) {
	tr := NewTree[struct{}]()
	const n = 100_000
	filter := func(i int) string {
		switch i % 4 {
		case 0:
			return "sensors/site" + itoa(i%97) + "/dev" + itoa(i) + "/temp"
		case 1:
			return "sensors/+/dev" + itoa(i) + "/#"
		case 2:
			return "/" + itoa(i) + "//+"
		default:
			return itoa(i) + "/#"
		}
	}
	for i := range n {
		tr.Add(filter(i), "k", struct{}{})
	}
	if tr.Len() != n {
		t.Fatalf("Len = %d, want %d", tr.Len(), n)
	}
	if tr.nodeCount() < n {
		t.Fatalf("nodes = %d, want >= %d", tr.nodeCount(), n)
	}
	for i := range n {
		if !tr.Remove(filter(i), "k") {
			t.Fatalf("Remove(%q) = false", filter(i))
		}
	}
	if tr.Len() != 0 || tr.nodeCount() != 0 {
		t.Fatalf("after removal: Len %d nodes %d, want 0 0", tr.Len(), tr.nodeCount())
	}
	if tr.root.children != nil || tr.root.plus != nil || tr.root.hash != nil {
		t.Fatal("root still holds children")
	}
}

func TestRetainedBasics(t *testing.T) {
	r := NewRetained[string]()
	r.Set("a/b", "1")
	r.Set("a/b", "2")
	r.Set("a", "3")
	r.Set("a/b/c", "4")
	if r.Len() != 3 {
		t.Fatalf("Len = %d, want 3", r.Len())
	}
	if v, ok := r.Get("a/b"); !ok || v != "2" {
		t.Fatalf("Get(a/b) = %q %v", v, ok)
	}
	for _, missing := range []string{"a/x", "a/b/c/d", "", "b"} {
		if _, ok := r.Get(missing); ok {
			t.Fatalf("Get(%q) found", missing)
		}
	}
	if r.Delete("a/x") || r.Delete("a/b/c/d") {
		t.Fatal("Delete of missing topic reported true")
	}
	if !r.Delete("a") || r.Delete("a") {
		t.Fatal("Delete(a) twice")
	}
	if v, ok := r.Get("a/b/c"); !ok || v != "4" {
		t.Fatal("Delete(a) removed its children")
	}
	r.Delete("a/b")
	r.Delete("a/b/c")
	if r.Len() != 0 || r.nodeCount() != 0 || r.root.children != nil {
		t.Fatalf("after deleting all: Len %d nodes %d", r.Len(), r.nodeCount())
	}
}

func TestRetainedPrune(t *testing.T) {
	r := NewRetained[int]()
	const n = 100_000
	topic := func(i int) string { return "sensors/site" + itoa(i%101) + "/dev" + itoa(i) + "/temp" }
	for i := range n {
		r.Set(topic(i), i)
	}
	for i := range n {
		if !r.Delete(topic(i)) {
			t.Fatalf("Delete(%q) = false", topic(i))
		}
	}
	if r.Len() != 0 || r.nodeCount() != 0 || r.root.children != nil {
		t.Fatalf("Len %d nodes %d", r.Len(), r.nodeCount())
	}
}

func TestValidFilter(t *testing.T) {
	for _, tc := range []struct {
		name, filter string
		want         error
	}{
		{"plain", "a/b", nil},
		{"hash alone", "#", nil},
		{"plus alone", "+", nil},
		{"mixed", "+/a/+/#", nil},
		{"empty levels", "//", nil},
		{"dollar", "$SYS/#", nil},
		{"empty", "", ErrEmpty},
		{"hash not last", "a/#/b", ErrBadWildcard},
		{"hash in level", "a/b#", ErrBadWildcard},
		{"plus in level", "a/b+/c", ErrBadWildcard},
		{"null", "a/\x00", ErrNullChar},
		{"utf8", "a/\xff", ErrBadUTF8},
		{"too long", strings.Repeat("a", 65536), ErrTooLong},
		{"max length", strings.Repeat("a", 65535), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidFilter(tc.filter); !errors.Is(err, tc.want) {
				t.Errorf("ValidFilter = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestValidTopic(t *testing.T) {
	for _, tc := range []struct {
		name, topic string
		want        error
	}{
		{"plain", "a/b", nil},
		{"slashes", "/", nil},
		{"dollar", "$SYS/x", nil},
		{"empty", "", ErrEmpty},
		{"plus", "a/+", ErrWildcardInTopic},
		{"hash", "a#", ErrWildcardInTopic},
		{"null", "\x00", ErrNullChar},
		{"utf8", "\xc0", ErrBadUTF8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidTopic(tc.topic); !errors.Is(err, tc.want) {
				t.Errorf("ValidTopic = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestMatchDoesNotAllocate guards the publish hot path.
func TestMatchDoesNotAllocate(t *testing.T) {
	tr := benchTree(1000)
	r := benchRetained(1000)
	n := 0
	fn := func(string, string, int) { n++ }
	rfn := func(string, int) { n++ }
	for _, topic := range []string{"sensors/site3/dev7/temp", "sensors/site3/dev7/hum", "$SYS/x", "a"} {
		if a := testing.AllocsPerRun(100, func() { tr.Match(topic, fn) }); a != 0 {
			t.Errorf("Tree.Match(%q): %v allocs", topic, a)
		}
		if a := testing.AllocsPerRun(100, func() { _ = MatchFilter("sensors/+/+/#", topic) }); a != 0 {
			t.Errorf("MatchFilter(%q): %v allocs", topic, a)
		}
	}
	if a := testing.AllocsPerRun(100, func() { r.Match("sensors/+/dev7/temp", rfn) }); a != 0 {
		t.Errorf("Retained.Match: %v allocs", a)
	}
}

func TestTreeGet(t *testing.T) {
	tr := NewTree[int]()
	tr.Add("a/+/#", "k", 1)
	tr.Add("a/b", "k", 2)
	for _, c := range []struct {
		filter, key string
		v           int
		ok          bool
	}{{"a/+/#", "k", 1, true}, {"a/b", "k", 2, true}, {"a/b", "x", 0, false}, {"a/+", "k", 0, false}, {"z", "k", 0, false}} {
		if v, ok := tr.Get(c.filter, c.key); v != c.v || ok != c.ok {
			t.Errorf("Get(%q, %q) = %d, %v; want %d, %v", c.filter, c.key, v, ok, c.v, c.ok)
		}
	}
}
