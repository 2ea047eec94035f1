package bridge

// Addresses returns the upstream addresses in the order they are tried,
// with any user:password in them redacted (url.URL.Redacted), for the
// status page. The default port of the scheme is filled in.
func (b *Bridge) Addresses() []string {
	addrs := b.c.Load().addrs // a reload may replace them
	out := make([]string, 0, len(addrs))
	for _, u := range addrs {
		out = append(out, u.Redacted())
	}
	return out
}
