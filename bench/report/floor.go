package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// floorTable is the -floor table (bench/floor.sh, bench/ab.sh): the same
// scenarios run in several alternating rounds by edgegw, the Go floor
// (bench/gofloor) and mosquitto, or by two edgegw builds; each broker's
// CPU % per round, its median and the median's ratio to mosquitto's (to
// the first broker's when mosquitto did not run). Rounds, not one pair:
// the figures are a few % of a core on a shared machine.
func floorTable(w io.Writer, title string, recs []record) {
	var scenarios, brokers []string
	cpu := map[[2]string][]float64{}
	wake := map[[2]string][]float64{}
	lost := map[[2]string]int64{}
	for i := range recs {
		r := &recs[i]
		if !slices.Contains(scenarios, r.Scenario) {
			scenarios = append(scenarios, r.Scenario)
		}
		if !slices.Contains(brokers, r.Broker) {
			brokers = append(brokers, r.Broker)
		}
		k := [2]string{r.Scenario, r.Broker}
		if v, ok := cpuPct(r); ok && r.Exit == 0 {
			cpu[k] = append(cpu[k], v)
		}
		if v, ok := wakeups(r); ok && r.Exit == 0 {
			wake[k] = append(wake[k], v)
		}
		lost[k] += r.Gen.Lost + r.Gen.UpLost
	}
	// The ratios are to mosquitto's median; without mosquitto (bench/ab.sh)
	// to the first broker's.
	refName := "mosquitto"
	if !slices.Contains(brokers, refName) && len(brokers) > 0 {
		refName = brokers[0]
	}
	fmt.Fprintf(w, "# %s\n\n", title)
	fmt.Fprintf(w, "Broker CPU %% of a core, sampled between the generator's handshakes; × %s = median / %s's median.\n\n", refName, refName)
	fmt.Fprintf(w, "| scenario | broker | CPU %% per round | median | × %s | wakeups/s (median) | lost |\n|---|---|---|---:|---:|---:|---:|\n", refName)
	for _, sc := range scenarios {
		ref, refOK := median(cpu[[2]string{sc, refName}])
		for _, b := range brokers {
			k := [2]string{sc, b}
			m, ok := median(cpu[k])
			if !ok {
				continue
			}
			rounds := make([]string, len(cpu[k]))
			for i, v := range cpu[k] {
				rounds[i] = fmt.Sprintf("%.2f", v)
			}
			ratio := "–"
			if refOK && ref > 0 {
				ratio = fmt.Sprintf("%.2f", m/ref)
			}
			wm, _ := median(wake[k])
			fmt.Fprintf(w, "| %s | %s | %s | %.2f | %s | %.0f | %d |\n", sc, b, strings.Join(rounds, ", "), m, ratio, wm, lost[k])
		}
	}
}

// median of vs; false when there is none.
func median(vs []float64) (float64, bool) {
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2], true
	} else {
		return (s[n/2-1] + s[n/2]) / 2, true
	}
}
