package topics

import (
	"sync"
	"testing"
)

const writers, readers, rounds = 4, 4, 5000

// overlap runs write(w) for each writer and read(fail) for each reader, all
// released together so they overlap, waits for them all, and reports what
// the readers failed with. Run with -race.
func overlap(t *testing.T, write func(w int), read func(fail func(string))) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan string, writers+readers)
	fail := func(e string) {
		select {
		case errs <- e:
		default: // enough reported already
		}
	}
	for w := range writers {
		wg.Go(func() {
			<-start
			write(w)
		})
	}
	for range readers {
		wg.Go(func() {
			<-start
			read(fail)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestTreeConcurrent runs writers and readers together. Each writer owns
// its keys, so the final state is known.
func TestTreeConcurrent(t *testing.T) {
	tr := NewTree[int]()
	tr.Add("sensors/#", "always", -1) // never removed: every Match sees it
	filters := []string{"sensors/+/temp", "sensors/a/temp", "sensors/#", "+/+/+", "#", "sensors/a/+"}
	overlap(t, func(w int) {
		k := "w" + itoa(w)
		for i := range rounds {
			f := filters[i%len(filters)]
			tr.Add(f, k, i)
			if i%3 != 0 {
				tr.Remove(f, k)
			}
		}
		for _, f := range filters {
			tr.Remove(f, k)
		}
	}, func(fail func(string)) {
		for range rounds {
			sawAlways := false
			tr.Match("sensors/a/temp", func(f, k string, v int) {
				if k == "always" {
					sawAlways = true
				}
				if !MatchFilter(f, "sensors/a/temp") {
					fail("bad match " + f)
				}
			})
			if !sawAlways {
				fail("missed the permanent subscription")
			}
			_ = tr.Len()
		}
	})
	if tr.Len() != 1 {
		t.Fatalf("Len = %d, want 1", tr.Len())
	}
	tr.Remove("sensors/#", "always")
	if tr.nodeCount() != 0 {
		t.Fatalf("nodes = %d, want 0", tr.nodeCount())
	}
}

// TestRetainedConcurrent runs writers and readers of retained messages
// together; each writer owns its topics and deletes them all at the end.
func TestRetainedConcurrent(t *testing.T) {
	r := NewRetained[int]()
	r.Set("sensors/fixed/temp", -1)
	overlap(t, func(w int) {
		for i := range rounds {
			topic := "sensors/w" + itoa(w) + "/" + itoa(i%50)
			r.Set(topic, i)
			if i%2 == 0 {
				r.Delete(topic)
			}
			_, _ = r.Get(topic)
		}
		for i := range 50 {
			r.Delete("sensors/w" + itoa(w) + "/" + itoa(i))
		}
	}, func(fail func(string)) {
		for range rounds {
			saw := false
			r.Match("sensors/+/#", func(topic string, v int) {
				if topic == "sensors/fixed/temp" {
					saw = true
				}
			})
			if !saw {
				fail("missed the fixed topic")
			}
		}
	})
	if r.Len() != 1 {
		t.Fatalf("Len = %d, want 1", r.Len())
	}
	r.Delete("sensors/fixed/temp")
	if r.nodeCount() != 0 {
		t.Fatalf("nodes = %d, want 0", r.nodeCount())
	}
}
