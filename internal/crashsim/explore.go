package crashsim

import (
	"fmt"
	"os"
	"strconv"
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
// under base (with base "", under a Scratch directory of its own) and
// calls check with it; check runs the log's real recovery there and
// returns what it broke, if anything. The directory is removed
// afterwards. It stops early after maxViolations (0: 20).
func Explore(tr *Trace, o Options, base string, maxViolations int, check func(dir string, st State) error) (Result, error) {
	if maxViolations <= 0 {
		maxViolations = 20
	}
	if base == "" {
		dir, done, err := Scratch(os.TempDir())
		if err != nil {
			return Result{}, err
		}
		defer done()
		base = dir
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

// TB is what Budget needs of a testing.TB.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Budget is the number of states a test explores per workload and mode:
// $CRASHSIM_STATES (make crashsim sets it), or def.
func Budget(t TB, def int) int {
	t.Helper()
	v := os.Getenv("CRASHSIM_STATES")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("CRASHSIM_STATES=%q: want a positive number", v)
	}
	return n
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
