package crashsim

import (
	"fmt"
	"os"
)

// Violation is a state whose recovery broke a promise.
type Violation struct {
	State State
	Err   error
}

func (v Violation) String() string { return fmt.Sprintf("%s: %v", v.State.How, v.Err) }

// Result sums up an exploration.
type Result struct {
	States     int // states recovered and checked
	Distinct   int // of them with distinct files and contents
	Violations []Violation
}

// Explore writes each state of the trace (States(o)) into a new directory
// under base and calls check with it; check runs the log's real recovery
// there and returns what it broke, if anything. The directory is removed
// afterwards. It stops early after maxViolations (0: 20).
func Explore(tr *Trace, o Options, base string, maxViolations int, check func(dir string, st State) error) (Result, error) {
	if maxViolations <= 0 {
		maxViolations = 20
	}
	var res Result
	seen := map[[32]byte]bool{}
	for st := range tr.States(o) {
		dir, err := os.MkdirTemp(base, "state-")
		if err != nil {
			return res, err
		}
		if err := st.WriteDir(dir); err != nil {
			os.RemoveAll(dir)
			return res, err
		}
		cerr := check(dir, st)
		os.RemoveAll(dir)
		res.States++
		if h := st.Hash(); !seen[h] {
			seen[h] = true
			res.Distinct++
		}
		if cerr != nil {
			res.Violations = append(res.Violations, Violation{st, cerr})
			if len(res.Violations) >= maxViolations {
				break
			}
		}
	}
	return res, nil
}

// Scratch returns a directory for the states: on tmpfs (/dev/shm) when
// there is one, as the states are many and short-lived, else under
// fallback.
func Scratch(fallback string) (string, func(), error) {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "crashsim-"); err == nil {
			return d, func() { os.RemoveAll(d) }, nil
		}
	}
	d, err := os.MkdirTemp(fallback, "crashsim-")
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}
