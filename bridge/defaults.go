package bridge

// DefaultConfig returns the config a zero Config runs with: what New fills
// in for every field left zero. cmd/edgegw's TestDefaultsAgree ties
// internal/config's bridge defaults to these, so the two cannot drift apart.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}
