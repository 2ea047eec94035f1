# make crashsim: the crash-state explorer (internal/crashsim) on both
# durable logs. Each workload (the spool's segments with rotation and
# deletion, the spool's acks.log with out-of-order acks and checkpoints,
# the state store with compaction and inbound QoS 2 groups) runs in each
# sync mode through a recording file system; CRASHSIM_STATES disk states
# a power cut could leave per workload and mode are opened by the real
# recovery and checked (TestPowerCutStates in bridge/spool and
# gateway/store). The last line reads
#
#   crashsim: <N> states, <M> violations
#
# N summed over the logs. make test runs the same tests with a sample of
# 60 states per workload and mode.

CRASHSIM_STATES ?= 4000

.PHONY: crashsim

crashsim:
	@out=$$(mktemp); \
	CRASHSIM_STATES=$(CRASHSIM_STATES) $(GO) test -count=1 -timeout 60m -run '^TestPowerCutStates$$' -v ./bridge/spool/ ./gateway/store/ > $$out 2>&1; rc=$$?; \
	grep -E '^(crashsim-result:|--- FAIL|FAIL|ok |panic)' $$out; \
	grep -A12 'violation:' $$out | head -80; \
	awk '/^crashsim-result:/ { for (i = 2; i <= NF; i++) { split($$i, kv, "="); f[kv[1]] = kv[2] } \
	      n[f["log"]] += f["states"]; d[f["log"]] += f["distinct"]; N += f["states"]; V += f["violations"] } \
	     END { for (l in n) printf "crashsim: %s: %d states (%d distinct)\n", l, n[l], d[l]; \
	           printf "crashsim: %d states, %d violations\n", N, V }' $$out; \
	rm -f $$out; exit $$rc
