package bridge

import (
	"fmt"
	"net/url"
	"slices"
	"testing"
)

func urls(t *testing.T, ss ...string) []*url.URL {
	t.Helper()
	var out []*url.URL
	for _, s := range ss {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

func strs(us []*url.URL) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.String())
	}
	return out
}

// TestSpreadOrder: a client id's order is a permutation of the addresses,
// the same every time; a fleet's client ids spread evenly over which
// address comes first; removing an address leaves the order of the rest.
func TestSpreadOrder(t *testing.T) {
	nodes := []string{"tcp://n1:1883", "tcp://n2:1883", "tcp://n3:1883"}
	addrs := urls(t, nodes...)
	first := map[string]int{}
	const fleet = 600
	for i := range fleet {
		id := fmt.Sprintf("gw-%d", i)
		o := strs(spreadOrder(addrs, id))
		if got := strs(spreadOrder(urls(t, nodes...), id)); !slices.Equal(o, got) {
			t.Fatalf("%s: order %v, then %v", id, o, got)
		}
		sorted := slices.Clone(o)
		slices.Sort(sorted)
		if !slices.Equal(sorted, nodes) {
			t.Fatalf("%s: %v is not a permutation of %v", id, o, nodes)
		}
		first[o[0]]++
		// Without n2, the others keep their relative order.
		rest := strs(spreadOrder(urls(t, nodes[0], nodes[2]), id))
		want := slices.DeleteFunc(slices.Clone(o), func(s string) bool { return s == nodes[1] })
		if !slices.Equal(rest, want) {
			t.Errorf("%s: without n2 %v, want %v", id, rest, want)
		}
	}
	for _, n := range nodes {
		// 200 expected each; 150..250 is over 4 standard deviations.
		if first[n] < 150 || first[n] > 250 {
			t.Errorf("%s first for %d of %d gateways, want about a third: %v", n, first[n], fleet, first)
		}
	}
	t.Logf("first address over %d client ids: %v", fleet, first)
}

// TestAddressOrderInCompile: spread (the default) orders the addresses by
// client id, strict keeps them as listed, anything else is an error.
func TestAddressOrderInCompile(t *testing.T) {
	base := Config{Name: "b", Addresses: []string{"tcp://n1:1883", "tcp://n2:1883", "tcp://n3:1883"},
		ClientID: "gw-7", CleanSession: true, Topics: []Rule{{Pattern: "a/#", Direction: Out}}}
	cfg := base
	cfg.setDefaults()
	c, err := cfg.compile()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strs(c.addrs), strs(spreadOrder(urls(t, base.Addresses...), "gw-7")); !slices.Equal(got, want) {
		t.Errorf("default order %v, want spread %v", got, want)
	}
	cfg.AddressOrder = AddressOrderStrict
	if c, err = cfg.compile(); err != nil || !slices.Equal(strs(c.addrs), base.Addresses) {
		t.Errorf("strict: %v, %v", strs(c.addrs), err)
	}
	cfg.AddressOrder = "random"
	if _, err := cfg.compile(); err == nil {
		t.Error("address_order random accepted")
	}
}
