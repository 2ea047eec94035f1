package topics

import (
	"sync/atomic"
	"testing"
)

// benchTree builds n subscriptions shaped like a gateway's: mostly exact
// device filters, some per-site and per-device wildcards, a few catch-alls.
func benchTree(n int) *Tree[int] {
	tr := NewTree[int]()
	for i := range n {
		site, dev := "site"+itoa(i%100), "dev"+itoa((i/100)%100)
		var f string
		switch (i / 7) % 20 {
		case 0, 1:
			f = "sensors/" + site + "/+/temp"
		case 2:
			f = "sensors/+/" + dev + "/#"
		case 3:
			f = "sensors/" + site + "/#"
		case 4:
			if i%50 == 0 {
				f = "#" // a few loggers
			} else {
				f = "alerts/" + site + "/" + dev
			}
		case 5:
			f = "sensors/" + site + "/" + dev + "/hum"
		default:
			f = "sensors/" + site + "/" + dev + "/temp"
		}
		tr.Add(f, key(i), i)
	}
	return tr
}

const benchTopic = "sensors/site42/dev17/temp"

func BenchmarkMatch(b *testing.B) {
	tr := benchTree(10_000)
	for _, bc := range []struct{ name, topic string }{
		{"fanout", benchTopic},                // exact + site/device wildcards
		{"few", "sensors/site42/dev17/other"}, // wildcards only
		{"dollar", "$SYS/broker/uptime"},      // no match: leading wildcards skipped
	} {
		b.Run(bc.name, func(b *testing.B) {
			matches := 0
			fn := func(string, string, int) { matches++ }
			b.ReportAllocs()
			for b.Loop() {
				tr.Match(bc.topic, fn)
			}
			b.ReportMetric(float64(matches)/float64(b.N), "matches/op")
		})
	}
}

func BenchmarkMatchParallel(b *testing.B) {
	tr := benchTree(10_000)
	var total atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		fn := func(string, string, int) { n++ }
		for pb.Next() {
			tr.Match(benchTopic, fn)
		}
		total.Add(int64(n))
	})
	b.ReportMetric(float64(total.Load())/float64(b.N), "matches/op")
}

// BenchmarkMatchFilterScan is the naive alternative for comparison:
// MatchFilter against every subscription.
func BenchmarkMatchFilterScan(b *testing.B) {
	tr := benchTree(10_000)
	var filters []string
	seen := map[string]bool{}
	tr.mu.RLock()
	var collect func(n *node[int])
	collect = func(n *node[int]) {
		if len(n.entries) > 0 && !seen[n.filter] {
			seen[n.filter] = true
			filters = append(filters, n.filter)
		}
		for _, c := range n.children {
			collect(c)
		}
		if n.plus != nil {
			collect(n.plus)
		}
		if n.hash != nil {
			collect(n.hash)
		}
	}
	collect(&tr.root)
	tr.mu.RUnlock()
	b.ReportAllocs()
	for b.Loop() {
		for _, f := range filters {
			MatchFilter(f, benchTopic)
		}
	}
}

func BenchmarkAddRemove(b *testing.B) {
	tr := benchTree(10_000)
	b.ReportAllocs()
	for b.Loop() {
		tr.Add("sensors/site42/+/pressure", "bench", 1)
		tr.Remove("sensors/site42/+/pressure", "bench")
	}
}

// benchRetained stores n topics sensors/site<s>/dev<d>/<kind>.
func benchRetained(n int) *Retained[int] {
	r := NewRetained[int]()
	kinds := []string{"temp", "hum", "pressure", "battery"}
	for i := range n {
		kind := kinds[i%4]
		site := "site" + itoa((i/4)%100)
		dev := "dev" + itoa(i/400)
		r.Set("sensors/"+site+"/"+dev+"/"+kind, i)
	}
	return r
}

func BenchmarkRetainedMatch(b *testing.B) {
	r := benchRetained(10_000)
	for _, filter := range []string{
		"sensors/site42/+/temp", // one site's temperatures
		"sensors/+/dev7/#",      // one device everywhere
		"sensors/site42/#",      // one site
	} {
		b.Run(filter, func(b *testing.B) {
			matches := 0
			fn := func(string, int) { matches++ }
			b.ReportAllocs()
			for b.Loop() {
				r.Match(filter, fn)
			}
			b.ReportMetric(float64(matches)/float64(b.N), "matches/op")
		})
	}
}
