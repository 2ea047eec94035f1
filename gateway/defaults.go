package gateway

// DefaultOptions returns the options a zero Options runs with: what New
// fills in for every field left zero. cmd/edgegw's TestDefaultsAgree ties
// internal/config's defaults to these, so the two cannot drift apart.
func DefaultOptions() Options { return Options{}.withDefaults() }
