//go:build linux

package spool

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// needURing skips where the kernel offers no io_uring to this process
// (kernel.io_uring_disabled=2): the machine's kernel, not a missing tool.
func needURing(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile("/proc/sys/kernel/io_uring_disabled"); err == nil && strings.TrimSpace(string(b)) == "2" {
		t.Skip("io_uring disabled by the kernel (kernel.io_uring_disabled=2)")
	}
}

// The small writes go through io_uring where the kernel offers it (this
// machine's does): a spool that silently fell back to ordinary writes
// would wake sysmon at every commit again (issue 16). docs/bridge.md:
// "from Linux 5.12 the commit's small writes go through io_uring".
func TestSmallWritesUseIOURing(t *testing.T) {
	needURing(t)
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch})
	if s.ring == nil {
		t.Fatal("the spool writes without io_uring")
	}
	appendN(t, s, 0, 10) // QoS 0, 1 and 2: written at once and by the commit
	if n := s.ring.writes.Load(); n < 10 {
		t.Fatalf("%d writes went through the ring, want at least the 10 records'", n)
	}
	// A ring that failed is not used again; the writes go the ordinary
	// way and nothing is lost.
	s.ring.mu.Lock()
	s.ring.broken = true
	s.ring.mu.Unlock()
	before := s.ring.writes.Load()
	appendN(t, s, 10, 10)
	if n := s.ring.writes.Load(); n != before {
		t.Fatalf("%d writes through a broken ring", n-before)
	}
	checkAll(t, s, 20)
}

func checkAll(t *testing.T, s *Spool, n int) { t.Helper(); checkAllFrom(t, s, 1, n) }

// checkAllFrom checks that s holds n records from first on, as appendN
// wrote them.
func checkAllFrom(t *testing.T, s *Spool, first ID, n int) {
	t.Helper()
	got := all(t, s)
	if len(got) != n || got[0].ID != first {
		t.Fatalf("%d records read back, want %d from %d", len(got), n, first)
	}
	for _, e := range got {
		if !equalMsg(e.Message, testMsg(int(e.ID)-1)) {
			t.Fatalf("record %d differs", e.ID)
		}
	}
}

// A ring that fails for real in the middle of the spool's life (its
// descriptor now names an eventfd: io_uring_enter refuses it) is given
// up: the write it refused, and every later one, is written the ordinary
// way, and every record reads back.
func TestRingFailingMidwayFallsBack(t *testing.T) {
	needURing(t)
	dir := filepath.Join(mountTmpfs(t, "4m", 0), "spool")
	s, lb := openLog(t, Options{Dir: dir, Sync: SyncBatch})
	if s.ring == nil {
		t.Fatal("the spool writes without io_uring")
	}
	appendN(t, s, 0, 10)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	s.ring.mu.Lock()
	err = unix.Dup3(efd, s.ring.fd, unix.O_CLOEXEC)
	s.ring.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	before := s.ring.writes.Load()
	appendN(t, s, 10, 10)
	s.ring.mu.Lock()
	broken := s.ring.broken
	s.ring.mu.Unlock()
	if !broken || s.ring.writes.Load() != before {
		t.Fatalf("broken %v, %d writes through the failed ring", broken, s.ring.writes.Load()-before)
	}
	for id := ID(1); id <= 5; id++ {
		s.Ack(id) // acks.log, the ordinary way
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Said once, at Warn: the writes still work, but not as configured.
	if n := strings.Count(lb.String(), "io_uring failed"); n != 1 || !strings.Contains(lb.String(), "level=WARN msg=\"spool io_uring failed") {
		t.Fatalf("%d io_uring failure lines, want one at Warn:\n%s", n, lb.String())
	}
	s = openT(t, Options{Dir: dir, Sync: SyncBatch})
	checkAllFrom(t, s, 6, 15)
}

const noURingChildEnv = "EDGEGW_SPOOL_NO_URING_CHILD"

// Where a seccomp filter refuses io_uring_setup with EPERM (as systemd's
// SystemCallFilter with SystemCallErrorNumber=EPERM does for a set without
// it), the spool writes the ordinary way and says so in one Info line.
// docs/bridge.md: "Without it ... ordinary writes, and one Info log line
// says so". The filter is for the whole process, so it runs in a child.
func TestWritesWithoutIOURing(t *testing.T) {
	if os.Getenv(noURingChildEnv) != "" {
		noURingChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWritesWithoutIOURing$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), noURingChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestWritesWithoutIOURing") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func noURingChild(t *testing.T) {
	// seccomp_data.nr at 0: io_uring_setup gets EPERM, the rest is allowed.
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_IO_URING_SETUP},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		t.Fatalf("seccomp: %v", e)
	}
	if _, err := newURing(); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("newURing under the filter: %v, want EPERM", err)
	}
	s, lb := openLog(t, Options{Dir: t.TempDir(), Sync: SyncBatch})
	defer s.Close()
	if s.ring != nil {
		t.Fatal("a ring under a filter that refuses io_uring")
	}
	appendN(t, s, 0, 20)
	s.Ack(1)
	checkAllFrom(t, s, 2, 19) // 20 appended, 1 acked
	var lines []string
	for _, ln := range strings.Split(lb.String(), "\n") {
		if strings.Contains(ln, "io_uring") {
			lines = append(lines, ln)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "level=INFO") || !strings.Contains(lines[0], "operation not permitted") {
		t.Fatalf("io_uring log lines %q, want one at Info with the error", lines)
	}
}

// After Close the kernel may hold a file its io_uring workers wrote to a
// moment longer (its last reference is dropped asynchronously): the
// spool's mount is busy for that moment, but not longer. docs/bridge.md:
// "after a stop the kernel may hold the spool's files a moment longer".
// A ring or a file left open at Close would keep it busy for good.
func TestMountFreeSoonAfterClose(t *testing.T) {
	needURing(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	s := openT(t, Options{Dir: filepath.Join(dir, "spool"), Sync: SyncBatch})
	if s.ring == nil {
		t.Fatal("the spool writes without io_uring")
	}
	appendN(t, s, 0, 50)
	for id := ID(1); id <= 25; id++ {
		s.Ack(id)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	busy := 0
	for {
		err := syscall.Unmount(dir, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			t.Fatalf("unmount after Close: %v (%d times busy)", err, busy)
		}
		busy++
		time.Sleep(time.Millisecond)
	}
	t.Logf("unmount after Close: busy %d times first", busy)
}

// The kernel's structures as laid out here: checked on every GOARCH the
// tests run on (GOARCH=arm under qemu-arm-static too, see the report).
func TestURingLayout(t *testing.T) {
	var p uringParams
	if unsafe.Sizeof(p) != 120 || unsafe.Offsetof(p.sqOff) != 40 || unsafe.Offsetof(p.cqOff) != 80 ||
		unsafe.Offsetof(p.sqOff.userAddr) != 32 || unsafe.Offsetof(p.cqOff.userAddr) != 32 || unsafe.Offsetof(p.features) != 20 {
		t.Fatalf("io_uring_params: size %d, sq_off at %d, cq_off at %d", unsafe.Sizeof(p), unsafe.Offsetof(p.sqOff), unsafe.Offsetof(p.cqOff))
	}
}

// Opening and closing spools leaves no descriptor and no mapping behind:
// the ring, its mappings and its eventfd go with Close.
func TestCloseReleasesTheRing(t *testing.T) {
	needURing(t)
	count := func() (fds, maps int) {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents), strings.Count(string(b), "io_uring")
	}
	dir := t.TempDir()
	fds0, maps0 := count()
	for i := range 5 {
		s, err := Open(Options{Dir: dir, Sync: SyncBatch, SyncInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if s.ring == nil {
			t.Fatal("the spool writes without io_uring")
		}
		appendN(t, s, i*10, 10)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if fds, maps := count(); fds != fds0 || maps != maps0 {
		t.Fatalf("after 5 opens and closes: %d descriptors (was %d), %d io_uring mappings (was %d)", fds, fds0, maps, maps0)
	}
}
