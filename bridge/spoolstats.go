package bridge

import "github.com/edgegw/edgegw/bridge/spool"

// SpoolStats returns the spool's own statistics (damage found at open,
// bytes written, fsyncs); ok is false while the spool is not open.
func (b *Bridge) SpoolStats() (st spool.Stats, ok bool) {
	sp := b.spool.Load()
	if sp == nil {
		return st, false
	}
	return sp.Stats(), true
}
