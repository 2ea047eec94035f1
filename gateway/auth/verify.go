package auth

// Password checks are the one thing a stranger on the LAN can make the
// broker spend CPU on without knowing anything: bcrypt at cost 10 takes
// tens of milliseconds of a core (hundreds on a Pi), by design. A flood of
// wrong passwords verified on every connection's own goroutine took both
// cores from the connected clients (issue 13 point 5). The verifier bounds
// that cost: at most verifySlots checks run at once, whatever the number of
// connections waiting, and a client that reconnects with the password it
// used successfully a moment ago is recognised from a short cache instead
// of paying bcrypt again. The cache holds a keyed hash (HMAC-SHA-256 under a
// key made at start) of user, password and stored hash: never the password,
// and a changed password or a reload makes the old entries unmatchable.

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"
)

const (
	// verifyCacheTTL is how long a successful verification is remembered.
	verifyCacheTTL = 10 * time.Minute
	// verifyCacheMax bounds the cache; when full, expired entries go, then
	// all of it (a reconnect storm of more distinct clients than this
	// simply pays bcrypt again).
	verifyCacheMax = 4096
)

// verifySlots is how many password checks may run at once: half the cores,
// at least one, so connected clients always keep the rest.
func verifySlots() int { return max(1, runtime.NumCPU()/2) }

type verifier struct {
	once  sync.Once
	slots chan struct{}
	key   []byte

	mu sync.Mutex
	ok map[[sha256.Size]byte]time.Time // keyed hash -> when it expires

	bcrypts atomic.Int64 // bcrypt comparisons made
	running atomic.Int32 // comparisons running now
	peak    atomic.Int32 // most comparisons ever running at once
}

func (v *verifier) init() {
	v.once.Do(func() {
		v.slots = make(chan struct{}, verifySlots())
		v.key = make([]byte, 32)
		rand.Read(v.key)
		v.ok = make(map[[sha256.Size]byte]time.Time)
	})
}

// check reports whether password matches the bcrypt hash stored for user.
func (v *verifier) check(user string, hash, password []byte) bool {
	v.init()
	k := v.cacheKey(user, hash, password)
	now := time.Now()
	v.mu.Lock()
	exp, hit := v.ok[k]
	v.mu.Unlock()
	if hit && now.Before(exp) {
		return true
	}
	if !v.compare(hash, password) {
		return false
	}
	v.remember(k, time.Now())
	return true
}

// recent reports whether password was verified for user (against hash)
// within verifyCacheTTL, without a bcrypt comparison.
func (v *verifier) recent(user string, hash, password []byte) bool {
	v.init()
	k := v.cacheKey(user, hash, password)
	v.mu.Lock()
	exp, hit := v.ok[k]
	v.mu.Unlock()
	return hit && time.Now().Before(exp)
}

// compare runs one bcrypt comparison in a verification slot.
func (v *verifier) compare(hash, password []byte) bool {
	v.init()
	v.slots <- struct{}{}
	defer func() { <-v.slots }()
	v.bcrypts.Add(1)
	n := v.running.Add(1)
	defer v.running.Add(-1)
	for p := v.peak.Load(); n > p && !v.peak.CompareAndSwap(p, n); p = v.peak.Load() {
	}
	return bcrypt.CompareHashAndPassword(hash, password) == nil
}

func (v *verifier) cacheKey(user string, hash, password []byte) [sha256.Size]byte {
	m := hmac.New(sha256.New, v.key)
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write(hash)
	m.Write([]byte{0})
	m.Write(password)
	var k [sha256.Size]byte
	m.Sum(k[:0])
	return k
}

func (v *verifier) remember(k [sha256.Size]byte, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.ok) >= verifyCacheMax {
		for key, exp := range v.ok {
			if !now.Before(exp) {
				delete(v.ok, key)
			}
		}
		if len(v.ok) >= verifyCacheMax {
			clear(v.ok)
		}
	}
	v.ok[k] = now.Add(verifyCacheTTL)
}

// forget drops every remembered verification (a reload).
func (v *verifier) forget() {
	v.init()
	v.mu.Lock()
	clear(v.ok)
	v.mu.Unlock()
}
