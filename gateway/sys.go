package gateway

import "strings"

// SysSubscribed reports whether any client subscribes to a $SYS filter:
// publishers of $SYS topics outside the gateway (the bridges' counters)
// publish only then, as publishSys does, so an idle broker stays idle and
// its counters count clients' messages.
func (s *Server) SysSubscribed() bool { return s.sysSubs.Load() > 0 }

// isSys reports whether a topic name or filter is in the broker's $SYS
// namespace.
func isSys(filter string) bool { return strings.HasPrefix(filter, "$SYS") }
