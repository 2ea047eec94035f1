package main

// Latency histogram. Design note: log-linear buckets (HDR-like) over
// nanoseconds: values below 2^subBits are exact, above that every power of two
// is split into 2^subBits equal sub-buckets, so the relative error is at most
// 1/2^subBits (~3%). The array is fixed, so recording never allocates; one
// Hist is owned by one reader goroutine and merged after it has finished.

import (
	"math"
	"math/bits"
	"time"
)

const (
	subBits    = 5
	subCount   = 1 << subBits
	numBuckets = (64 - subBits) << subBits
)

// Hist is a fixed-size latency histogram. Not safe for concurrent use.
type Hist struct {
	counts [numBuckets]uint64
	n      uint64
	max    uint64
}

func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	top := v >> uint(shift) // in [subCount, 2*subCount)
	return (shift+1)<<subBits + int(top-subCount)
}

// bucketHigh is the largest value that falls in bucket i.
func bucketHigh(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	shift := i>>subBits - 1
	top := uint64(subCount + i&(subCount-1))
	return (top+1)<<uint(shift) - 1
}

// Record adds one sample (negative durations count as 0).
func (h *Hist) Record(d time.Duration) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d)
	}
	h.counts[bucketOf(v)]++
	h.n++
	if v > h.max {
		h.max = v
	}
}

// Merge adds o's samples to h.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	if o.max > h.max {
		h.max = o.max
	}
}

// Count is the number of samples.
func (h *Hist) Count() uint64 { return h.n }

// Max is the largest sample.
func (h *Hist) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the upper bound of the bucket holding the q-quantile
// (0 < q <= 1), capped at the maximum; 0 with no samples.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			v := bucketHigh(i)
			if v > h.max {
				v = h.max
			}
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}
