package crashsim

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Trace is a workload's recorded operations, in order.
type Trace struct {
	Ops []Op
}

// Options bound the states States builds.
type Options struct {
	// Max is the number of states at most (0: 1000). The crash points
	// are spread over the whole trace, each gets about Max/points.
	Max int
	// Seed seeds the sampling (crash points when there are more than
	// Max/4, and the random subsets).
	Seed uint64
	// Sector is the size a write tears at (0: 512).
	Sector int
}

// State is one disk state a power cut could leave.
type State struct {
	// Crash is the number of operations issued before the cut: a Mark
	// at most Crash happened before it.
	Crash int
	// Files maps each file name in the directory to its content.
	Files map[string][]byte
	// How says how the state was built from the trace (for a report).
	How string
}

// WriteDir writes the state into dir (which must exist and be empty).
func (s State) WriteDir(dir string) error {
	for name, b := range s.Files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Hash identifies the state's files and contents.
func (s State) Hash() [32]byte {
	h := sha256.New()
	names := make([]string, 0, len(s.Files))
	for n := range s.Files {
		names = append(names, n)
	}
	slices.Sort(names)
	var n8 [8]byte
	for _, n := range names {
		h.Write([]byte(n))
		binary.LittleEndian.PutUint64(n8[:], uint64(len(s.Files[n])))
		h.Write(n8[:])
		h.Write(s.Files[n])
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// choice is one state at a crash point: which of the operations not yet
// durable reached the disk.
type choice struct {
	dirs int // the first dirs non-durable directory operations
	// The non-durable data operations kept: those in data, or with
	// upTo >= 0 those up to trace index upTo, or with all every one but
	// omit (trace index, or -1).
	data  map[int]bool
	upTo  int
	all   bool
	omit  int
	torn  int   // trace index of a write kept torn, or -1
	keep  int64 // of the torn write: bytes kept
	zeros bool  // of the torn write: the rest is zeros at its length
	how   string
}

// point is what is durable at a crash point.
type point struct {
	k       int
	durable []bool // durable[j]: op j reached the disk for sure
	dirs    []int  // non-durable directory operations, in order
	data    []int  // non-durable data operations, in order
	pending []int  // both, in order
}

func (t *Trace) point(k int) point {
	p := point{k: k, durable: make([]bool, k)}
	synced := map[int]bool{}
	dirSynced := false
	for j := k - 1; j >= 0; j-- {
		op := t.Ops[j]
		switch {
		case op.Kind == Sync:
			synced[op.Inode] = true
		case op.Kind == SyncDir:
			dirSynced = true
		case op.Kind.dirOp():
			p.durable[j] = dirSynced
		case op.Kind.dataOp():
			p.durable[j] = synced[op.Inode]
		}
	}
	for j := range k {
		op := t.Ops[j]
		if p.durable[j] || !(op.Kind.dirOp() || op.Kind.dataOp()) {
			continue
		}
		if op.Kind.dirOp() {
			p.dirs = append(p.dirs, j)
		} else {
			p.data = append(p.data, j)
		}
		p.pending = append(p.pending, j)
	}
	return p
}

// States returns the disk states a power cut during the trace could
// leave, at most o.Max of them, the most telling first at each crash
// point (see the package documentation). Within a crash point no state
// is returned twice.
func (t *Trace) States(o Options) iter.Seq[State] {
	if o.Max <= 0 {
		o.Max = 1000
	}
	if o.Sector <= 0 {
		o.Sector = 512
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	points := t.crashPoints(o.Max, rng)
	return func(yield func(State) bool) {
		left := o.Max
		seen := make([]map[[32]byte]bool, len(points))
		var open []int // points with unsynced operations: room for more
		for i, k := range points {
			per := left / (len(points) - i)
			seen[i] = map[[32]byte]bool{}
			if per == 0 {
				continue
			}
			n := 0
			p, more := t.statesAt(k, per, o.Sector, rng, seen[i])
			for st := range p {
				if !yield(st) {
					return
				}
				n++
			}
			left -= n
			if more {
				open = append(open, i)
			}
		}
		// What the points could not fill: random states of random
		// points that have unsynced operations, until the budget is
		// spent or new states are hard to find.
		for miss := 0; left > 0 && len(open) > 0 && miss < 50*o.Max/len(points)+100; {
			i := open[rng.IntN(len(open))]
			p := t.point(points[i])
			st := t.build(p, t.random(p, o.Sector, rng))
			if h := st.Hash(); seen[i][h] {
				miss++
				continue
			} else {
				seen[i][h] = true
			}
			if !yield(st) {
				return
			}
			left--
		}
	}
}

// crashPoints returns the crash points to explore, ascending: every
// operation's end when there are few enough, else a sample that keeps
// the end of every barrier (fsync, directory fsync, rename) and spreads
// the rest.
func (t *Trace) crashPoints(max int, rng *rand.Rand) []int {
	n := len(t.Ops)
	want := max / 2
	if want < 1 {
		want = 1
	}
	all := make([]int, 0, n+1)
	for k := 0; k <= n; k++ {
		all = append(all, k)
	}
	if len(all) <= want {
		return all
	}
	var keep, rest []int
	for _, k := range all {
		if k > 0 && k < n && (t.Ops[k].Kind == Sync || t.Ops[k].Kind == SyncDir || t.Ops[k-1].Kind == Rename) {
			keep = append(keep, k) // just before a barrier, just after a rename
		} else {
			rest = append(rest, k)
		}
	}
	if len(keep) > want/2 {
		rng.Shuffle(len(keep), func(i, j int) { keep[i], keep[j] = keep[j], keep[i] })
		keep = keep[:want/2]
	}
	rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	keep = append(keep, rest[:min(len(rest), want-len(keep))]...)
	slices.Sort(keep)
	return keep
}

// statesAt yields up to max distinct states of crash point k (not in
// seen, which it adds them to); more reports whether the point has
// unsynced operations, so random states of it may add more.
func (t *Trace) statesAt(k, max, sector int, rng *rand.Rand, seen map[[32]byte]bool) (states iter.Seq[State], more bool) {
	p := t.point(k)
	return func(yield func(State) bool) {
		n := 0
		emit := func(c choice) bool {
			st := t.build(p, c)
			h := st.Hash()
			if seen[h] {
				return true
			}
			seen[h] = true
			n++
			return yield(st)
		}
		sys := t.systematic(p, sector)
		if len(sys) > max {
			// The first two (only the synced, everything) and an even
			// spread of the rest.
			picked := sys[:2:2]
			rest := sys[2:]
			want := max - 2
			for i := range want {
				picked = append(picked, rest[i*len(rest)/want])
			}
			sys = picked
		}
		for _, c := range sys {
			if n >= max || !emit(c) {
				return
			}
		}
		if len(p.pending) == 0 {
			return
		}
		for tries := 0; n < max && tries < 4*max; tries++ {
			if !emit(t.random(p, sector, rng)) {
				return
			}
		}
	}, len(p.pending) > 0
}

// systematic lists the states of a crash point tried first.
func (t *Trace) systematic(p point, sector int) []choice {
	out := []choice{
		{dirs: 0, upTo: -1, omit: -1, torn: -1, how: "only what was fsynced"},
		{dirs: len(p.dirs), upTo: -1, all: true, omit: -1, torn: -1, how: "everything written (as kill -9 leaves it)"},
	}
	// In time order: the first i pending operations, the last one torn
	// if it is a write.
	dirs := 0
	for i, j := range p.pending {
		op := t.Ops[j]
		if op.Kind.dirOp() {
			dirs++
		}
		out = append(out, choice{dirs: dirs, upTo: j, omit: -1, torn: -1, how: fmt.Sprintf("the first %d of %d unsynced operations", i+1, len(p.pending))})
		if op.Kind == Write {
			for _, tc := range tears(op, sector) {
				c := tc
				c.dirs, c.upTo, c.omit, c.torn = dirs, j, -1, j
				c.how = fmt.Sprintf("the first %d of %d unsynced operations, the last %s", i+1, len(p.pending), tc.how)
				out = append(out, c)
			}
		}
	}
	// All but one.
	for _, j := range p.pending {
		c := choice{dirs: len(p.dirs), upTo: -1, all: true, omit: -1, torn: -1}
		if t.Ops[j].Kind.dirOp() {
			c.dirs = slices.Index(p.dirs, j)
			c.how = fmt.Sprintf("everything but directory operations from #%d (%s %s) on", j, t.Ops[j].Kind, t.Ops[j].Name)
		} else {
			c.omit = j
			c.how = fmt.Sprintf("everything but operation #%d (%s)", j, t.Ops[j].Kind)
		}
		out = append(out, c)
	}
	return out
}

// tears are the ways write op can tear: cut at each sector boundary inside
// it (at most 4: the first, the last and two between), or zeros from
// there at its full length.
func tears(op Op, sector int) []choice {
	end := op.Off + int64(len(op.Data))
	var bounds []int64
	for b := (op.Off/int64(sector) + 1) * int64(sector); b < end; b += int64(sector) {
		bounds = append(bounds, b)
	}
	if len(bounds) > 4 {
		bounds = []int64{bounds[0], bounds[len(bounds)/3], bounds[2*len(bounds)/3], bounds[len(bounds)-1]}
	}
	var out []choice
	for _, b := range bounds {
		out = append(out, choice{keep: b - op.Off, how: fmt.Sprintf("write torn at byte %d of the file", b)})
	}
	out = append(out, choice{keep: 0, zeros: true, how: fmt.Sprintf("write of %d bytes at %d left as zeros", len(op.Data), op.Off)})
	for _, b := range bounds {
		out = append(out, choice{keep: b - op.Off, zeros: true, how: fmt.Sprintf("write zeros from byte %d of the file", b)})
	}
	return out
}

// random is a random state of the crash point: a prefix of the directory
// operations, a random subset of the data operations, perhaps one write
// of them torn.
func (t *Trace) random(p point, sector int, rng *rand.Rand) choice {
	c := choice{dirs: rng.IntN(len(p.dirs) + 1), data: map[int]bool{}, upTo: -1, omit: -1, torn: -1}
	var writes []int
	for _, j := range p.data {
		if rng.IntN(2) == 0 {
			c.data[j] = true
			if t.Ops[j].Kind == Write {
				writes = append(writes, j)
			}
		}
	}
	c.how = fmt.Sprintf("random: %d of %d unsynced directory operations, %d of %d unsynced writes",
		c.dirs, len(p.dirs), len(c.data), len(p.data))
	if len(writes) > 0 && rng.IntN(2) == 0 {
		j := writes[rng.IntN(len(writes))]
		ts := tears(t.Ops[j], sector)
		tc := ts[rng.IntN(len(ts))]
		c.torn, c.keep, c.zeros = j, tc.keep, tc.zeros
		c.how += fmt.Sprintf(", #%d %s", j, tc.how)
	}
	return c
}

// build applies the trace up to the crash point as c says.
func (t *Trace) build(p point, c choice) State {
	names := map[string]int{}
	data := map[int][]byte{}
	dirsLeft := c.dirs
	for j := range p.k {
		op := t.Ops[j]
		switch {
		case op.Kind.dirOp():
			if !p.durable[j] {
				if dirsLeft == 0 {
					continue
				}
				dirsLeft--
			}
			switch op.Kind {
			case Create:
				names[op.Name] = op.Inode
			case Rename:
				if ino, ok := names[op.Name]; ok {
					names[op.To] = ino
					delete(names, op.Name)
				}
			case Remove:
				delete(names, op.Name)
			}
		case op.Kind.dataOp():
			if !p.durable[j] && !c.keeps(j) {
				continue
			}
			b := data[op.Inode]
			if op.Kind == Truncate {
				data[op.Inode] = resize(b, op.Off)
				continue
			}
			w := op.Data
			if j == c.torn {
				if c.zeros {
					w = append(append([]byte(nil), w[:c.keep]...), make([]byte, int64(len(w))-c.keep)...)
				} else {
					w = w[:c.keep]
				}
			}
			if end := op.Off + int64(len(w)); end > int64(len(b)) {
				b = resize(b, end)
			}
			copy(b[op.Off:], w)
			data[op.Inode] = b
		}
	}
	files := make(map[string][]byte, len(names))
	for n, ino := range names {
		files[n] = data[ino]
	}
	how := c.how
	if len(p.pending) == 0 {
		how = "everything fsynced"
	}
	return State{Crash: p.k, Files: files, How: fmt.Sprintf("cut after op %d: %s", p.k, how)}
}

// resize sets b's length to n, zeros where it grows. Bytes past len(b)
// within its capacity were never written (a shrink clips the capacity),
// so they are zeros already.
func resize(b []byte, n int64) []byte {
	if n <= int64(len(b)) {
		return b[:n:n]
	}
	if n <= int64(cap(b)) {
		return b[:n]
	}
	out := make([]byte, n, n+n/2)
	copy(out, b)
	return out
}

// keeps reports whether the non-durable data operation j reached the
// disk in c.
func (c *choice) keeps(j int) bool {
	switch {
	case c.all:
		return j != c.omit
	case c.upTo >= 0:
		return j <= c.upTo
	}
	return c.data[j]
}

// Describe prints the trace's operations from..to, for a report.
func (t *Trace) Describe(from, to int) string {
	var b strings.Builder
	for j := max(from, 0); j < min(to, len(t.Ops)); j++ {
		op := t.Ops[j]
		fmt.Fprintf(&b, "#%d %s", j, op.Kind)
		switch op.Kind {
		case Create, Remove:
			fmt.Fprintf(&b, " %s (inode %d)", op.Name, op.Inode)
		case Rename:
			fmt.Fprintf(&b, " %s -> %s", op.Name, op.To)
		case Write:
			fmt.Fprintf(&b, " inode %d: %d bytes at %d", op.Inode, len(op.Data), op.Off)
		case Truncate:
			fmt.Fprintf(&b, " inode %d to %d", op.Inode, op.Off)
		case Sync:
			fmt.Fprintf(&b, " inode %d", op.Inode)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Synced is the state a cut after the first k operations leaves when
// nothing that was not fsynced reached the disk: a regression test's
// fixed state.
func (t *Trace) Synced(k int) State {
	return t.build(t.point(k), choice{upTo: -1, omit: -1, torn: -1, how: "only what was fsynced"})
}
