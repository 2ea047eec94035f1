package bridge

import (
	"hash/fnv"
	"net/url"
	"slices"
)

// Address orders (Config.AddressOrder): which of several upstream
// addresses a bridge tries first.
const (
	// AddressOrderSpread, the default, tries the addresses in an order of
	// this bridge's own, stable for its client id: a fleet of gateways
	// with one address list spreads over the listed nodes instead of all
	// taking the first.
	AddressOrderSpread = "spread"
	// AddressOrderStrict tries them as listed: the first is the primary,
	// the rest are fallbacks.
	AddressOrderStrict = "strict"
)

// spreadOrder returns addrs in the order a bridge with client id clientID
// tries them: by rendezvous (highest random weight) hashing, each address
// weighted by a hash of the client id and the address, highest first. The
// order is stable across restarts and reloads for one client id; client
// ids spread evenly over which address comes first; and adding or
// removing an address moves only the bridges that pick it first (the
// others keep their order of the rest).
func spreadOrder(addrs []*url.URL, clientID string) []*url.URL {
	type weighted struct {
		u *url.URL
		w uint64
	}
	ws := make([]weighted, len(addrs))
	for i, u := range addrs {
		h := fnv.New64a()
		h.Write([]byte(clientID))
		h.Write([]byte{0})
		h.Write([]byte(u.String()))
		ws[i] = weighted{u, mix64(h.Sum64())}
	}
	slices.SortStableFunc(ws, func(a, b weighted) int {
		switch {
		case a.w > b.w:
			return -1
		case a.w < b.w:
			return 1
		}
		return 0
	})
	out := make([]*url.URL, len(ws))
	for i, w := range ws {
		out[i] = w.u
	}
	return out
}

// mix64 is the finalizer of MurmurHash3 (fmix64): FNV-1a's high bits
// depend little on the last bytes of short inputs, and the weights are
// compared from the high bits down.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Addresses returns the upstream addresses in the order they are tried
// (address_order), with any user:password in them redacted
// (url.URL.Redacted), for the status page. The default port of the scheme
// is filled in.
func (b *Bridge) Addresses() []string {
	addrs := b.c.Load().addrs // a reload may replace them
	out := make([]string, 0, len(addrs))
	for _, u := range addrs {
		out = append(out, u.Redacted())
	}
	return out
}
