package topics

import (
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// Small alphabets make collisions (shared prefixes, same filter twice,
// matches) likely. Filters may contain invalid wildcards ("a+", "#" not
// last): all matchers must agree that those are literal.
var (
	filterLevel = rapid.SampledFrom([]string{"a", "b", "", "$s", "+", "+", "#", "#", "a+"})
	topicLevel  = rapid.SampledFrom([]string{"a", "b", "", "$s", "a+", "#"})
	genFilter   = joined(filterLevel)
	genTopic    = joined(topicLevel)
	genKey      = rapid.SampledFrom([]string{"c1", "c2", "c3"})
)

func joined(level *rapid.Generator[string]) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		return strings.Join(rapid.SliceOfN(level, 1, 4).Draw(t, "levels"), "/")
	})
}

type sub struct{ filter, key string }

// TestTreeProperty: after any sequence of Add and Remove, Tree.Match
// returns exactly the (filter, key) pairs for which MatchFilter is true,
// with their latest values.
func TestTreeProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tr := NewTree[int]()
		model := map[sub]int{}
		next := 0
		t.Repeat(map[string]func(*rapid.T){
			"add": func(t *rapid.T) {
				s := sub{genFilter.Draw(t, "filter"), genKey.Draw(t, "key")}
				next++
				_, had := model[s]
				if got := tr.Add(s.filter, s.key, next); got != had {
					t.Fatalf("Add(%q,%q) replaced = %v, want %v", s.filter, s.key, got, had)
				}
				model[s] = next
			},
			"remove": func(t *rapid.T) {
				s := sub{genFilter.Draw(t, "filter"), genKey.Draw(t, "key")}
				if len(model) > 0 && rapid.Bool().Draw(t, "existing") {
					keys := make([]sub, 0, len(model))
					for k := range model {
						keys = append(keys, k)
					}
					slices.SortFunc(keys, func(a, b sub) int {
						return strings.Compare(a.filter+"\x00"+a.key, b.filter+"\x00"+b.key)
					})
					s = rapid.SampledFrom(keys).Draw(t, "sub")
				}
				_, had := model[s]
				if got := tr.Remove(s.filter, s.key); got != had {
					t.Fatalf("Remove(%q,%q) = %v, want %v", s.filter, s.key, got, had)
				}
				delete(model, s)
			},
			"match": func(t *rapid.T) {
				topic := genTopic.Draw(t, "topic")
				var got, want []string
				tr.Match(topic, func(filter, key string, v int) {
					if mv := model[sub{filter, key}]; mv != v {
						t.Fatalf("Match(%q): (%q,%q) value %d, want %d", topic, filter, key, v, mv)
					}
					got = append(got, filter+"|"+key)
				})
				for s := range model {
					if MatchFilter(s.filter, topic) {
						want = append(want, s.filter+"|"+s.key)
					}
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("Match(%q):\n got %q\nwant %q", topic, got, want)
				}
			},
			"": func(t *rapid.T) { // invariants after every step
				if tr.Len() != len(model) {
					t.Fatalf("Len = %d, want %d", tr.Len(), len(model))
				}
				if len(model) == 0 && tr.nodeCount() != 0 {
					t.Fatalf("empty tree has %d nodes", tr.nodeCount())
				}
			},
		})
	})
}

// TestRetainedProperty: after any sequence of Set and Delete,
// Retained.Match returns exactly the stored topics for which MatchFilter is
// true, with their latest values.
func TestRetainedProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := NewRetained[int]()
		model := map[string]int{}
		next := 0
		t.Repeat(map[string]func(*rapid.T){
			"set": func(t *rapid.T) {
				topic := genTopic.Draw(t, "topic")
				next++
				r.Set(topic, next)
				model[topic] = next
			},
			"delete": func(t *rapid.T) {
				topic := genTopic.Draw(t, "topic")
				_, had := model[topic]
				if got := r.Delete(topic); got != had {
					t.Fatalf("Delete(%q) = %v, want %v", topic, got, had)
				}
				delete(model, topic)
			},
			"get": func(t *rapid.T) {
				topic := genTopic.Draw(t, "topic")
				want, had := model[topic]
				if got, ok := r.Get(topic); ok != had || got != want {
					t.Fatalf("Get(%q) = %d %v, want %d %v", topic, got, ok, want, had)
				}
			},
			"match": func(t *rapid.T) {
				filter := genFilter.Draw(t, "filter")
				var got, want []string
				r.Match(filter, func(topic string, v int) {
					if model[topic] != v {
						t.Fatalf("Match(%q): %q value %d, want %d", filter, topic, v, model[topic])
					}
					got = append(got, topic)
				})
				for topic := range model {
					if MatchFilter(filter, topic) {
						want = append(want, topic)
					}
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("Match(%q):\n got %q\nwant %q", filter, got, want)
				}
			},
			"": func(t *rapid.T) {
				if r.Len() != len(model) {
					t.Fatalf("Len = %d, want %d", r.Len(), len(model))
				}
				if len(model) == 0 && r.nodeCount() != 0 {
					t.Fatalf("empty store has %d nodes", r.nodeCount())
				}
			},
		})
	})
}

// FuzzMatch cross-checks the three matchers on arbitrary strings.
func FuzzMatch(f *testing.F) {
	for _, tc := range matchCases {
		f.Add(tc.filter, tc.topic)
	}
	f.Fuzz(func(t *testing.T, filter, topic string) {
		want := MatchFilter(filter, topic)
		tr := NewTree[int]()
		tr.Add(filter, "k", 1)
		n := 0
		tr.Match(topic, func(string, string, int) { n++ })
		if (n == 1) != want || n > 1 {
			t.Fatalf("Tree{%q}.Match(%q): %d calls, MatchFilter %v", filter, topic, n, want)
		}
		r := NewRetained[int]()
		r.Set(topic, 1)
		n = 0
		r.Match(filter, func(string, int) { n++ })
		if (n == 1) != want || n > 1 {
			t.Fatalf("Retained{%q}.Match(%q): %d calls, MatchFilter %v", topic, filter, n, want)
		}
		if !tr.Remove(filter, "k") || tr.nodeCount() != 0 || !r.Delete(topic) || r.nodeCount() != 0 {
			t.Fatal("remove/prune failed")
		}
	})
}
