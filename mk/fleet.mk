# The fleet run (bench/fleet); included from the Makefile. Not part of
# `make test`.
#
#   make fleet    builds bin/edgegw and the driver (bin/edgegw-fleet, its
#                 own Go module: nats-server never enters go.mod), then
#                 runs 20 gateways from one config file against a 3-node
#                 NATS cluster with MQTT, all on 127.0.0.1 (~1 min): the
#                 spread over the nodes, a node killed with the failover
#                 time of each of its gateways, two gateways killed with
#                 kill -9, lost and duplicated messages counted at the
#                 cluster, and two gateways with one client id named in
#                 the log. Writes bench/results/fleet-latest.md; fails if
#                 a promise fails. FLEET_FLAGS passes flags to the driver
#                 (bin/edgegw-fleet -h lists them).

FLEET_FLAGS ?=

.PHONY: fleet

fleet: build
	cd bench/fleet && $(GO) build -o $(CURDIR)/bin/edgegw-fleet .
	./bin/edgegw-fleet -edgegw bin/edgegw -report bench/results/fleet-latest.md $(FLEET_FLAGS)
