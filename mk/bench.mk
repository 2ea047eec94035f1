# Benchmark targets; included from the top-level Makefile.
#
#   make bench        edgegw vs mosquitto side by side (~10 min), writes
#                     bench/results/<date>.md, latest.md, latest.png
#   make bench-quick  the same with 2 s per scenario and 1000 idle connections
#
# Knobs: BENCH_DURATION, BENCH_SCENARIOS, BENCH_BROKERS, BENCH_IDLE_CONNS
# (see bench/README.md).

.PHONY: bench bench-quick

bench:
	./bench/run.sh

bench-quick:
	BENCH_DURATION=2s BENCH_IDLE_CONNS=1000 ./bench/run.sh
