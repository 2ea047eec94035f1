package main

// Broker samples from /proc: resident memory (VmRSS now, VmHWM = the peak
// since the process started; every attack gets a fresh broker, so VmHWM is
// the attack's peak) and CPU time (utime+stime of /proc/<pid>/stat).

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime/stime: 100 on every Linux ABI
// this project ships for (sysconf(_SC_CLK_TCK) needs cgo).
const clockTicks = 100

// memSample is what /proc/<pid>/status says about memory, in bytes.
type memSample struct {
	RSS, HWM int64
}

// parseStatus reads VmRSS and VmHWM ("VmRSS:   1234 kB") from a status file.
func parseStatus(b []byte) (memSample, error) {
	var m memSample
	var gotRSS, gotHWM bool
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		f := strings.Fields(string(line))
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return m, fmt.Errorf("status %s: %w", f[0], err)
		}
		switch f[0] {
		case "VmRSS:":
			m.RSS, gotRSS = n*1024, true
		case "VmHWM:":
			m.HWM, gotHWM = n*1024, true
		}
	}
	if !gotRSS || !gotHWM {
		return m, fmt.Errorf("status: no VmRSS/VmHWM")
	}
	return m, nil
}

// parseStatCPU returns utime+stime in clock ticks from a /proc/<pid>/stat
// line. The command name (field 2) is in parentheses and may hold spaces,
// so fields are counted from the last ')'.
func parseStatCPU(b []byte) (int64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// After ")": state(3) ppid(4) ... utime(14) stime(15): indexes 11 and 12.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the name", len(f))
	}
	ut, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat utime: %w", err)
	}
	st, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat stime: %w", err)
	}
	return ut + st, nil
}

func readMem(pid int) (memSample, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memSample{}, err
	}
	return parseStatus(b)
}

// readCPU is the process's user+system CPU time in seconds.
func readCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	t, err := parseStatCPU(b)
	return float64(t) / clockTicks, err
}
