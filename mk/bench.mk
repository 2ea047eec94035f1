# Benchmark targets; included from the top-level Makefile.
#
#   make bench        edgegw vs mosquitto side by side (~10-12 min), writes
#                     bench/results/<date>.md, latest.md, latest.png;
#                     then the drain benchmark (bench-drain) and the lanes
#                     benchmark (bench-lanes)
#   make bench-quick  the same with 2 s per scenario and 1000 idle connections
#                     (no drain)
#   make bench-drain  a bridge's backlog drained over a slow link, edgegw's
#                     bridge vs mosquitto's (~4 min), writes
#                     bench/results/drain-<date>.md, drain-latest.md
#   make bench-lanes  priority lanes and live-first drain (issue 17): a
#                     100,000-message bulk backlog drained over a 2 Mbit/s
#                     link with drain fifo and live-first (~6 min), writes
#                     bench/results/lanes-<date>.md, lanes-latest.md and
#                     lanes-latest.png
#   make bench-floor  the sensor fleets by edgegw, the Go floor (bench/gofloor,
#                     two designs) and mosquitto in 3 alternating rounds
#                     (~13 min), writes bench/results/floor-<date>.md,
#                     floor-latest.md
#   make bench-ab A=<rev|binary> B=<rev|binary>
#                     two edgegw builds in 4 alternating rounds of sensors
#                     (~5 min), writes bench/results/ab-<date>.md,
#                     ab-raw-<date>.jsonl, ab-latest.md
#
# Knobs: BENCH_DURATION, BENCH_SCENARIOS, BENCH_BROKERS, BENCH_IDLE_CONNS,
# BENCH_SENSORS_DURATION (see bench/README.md); DRAIN_SCENARIOS,
# DRAIN_GATEWAYS for the drain; LANES_SCENARIOS, LANES_MODES, LANES_COUNT,
# LANES_RATE, LANES_RTT, LANES_LINK_RATE, LANES_DURATION for the lanes.

.PHONY: bench bench-quick bench-drain bench-lanes bench-floor bench-ab

bench:
	./bench/run.sh
	./bench/drain.sh
	./bench/lanes.sh

bench-drain:
	./bench/drain.sh

bench-lanes:
	./bench/lanes.sh

bench-floor:
	./bench/floor.sh

bench-ab:
	@test -n "$(A)" -a -n "$(B)" || { echo "usage: make bench-ab A=<revision or binary> B=<revision or binary>"; exit 2; }
	./bench/ab.sh "$(A)" "$(B)"

bench-quick:
	BENCH_DURATION=2s BENCH_SENSORS_DURATION=4s BENCH_IDLE_CONNS=1000 ./bench/run.sh
