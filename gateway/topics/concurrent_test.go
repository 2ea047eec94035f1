package topics

import (
	"sync"
	"testing"
)

// TestTreeConcurrent runs writers and readers together; run with -race.
// Each writer owns its keys, so the final state is known.
func TestTreeConcurrent(t *testing.T) {
	tr := NewTree[int]()
	tr.Add("sensors/#", "always", -1) // never removed: every Match sees it
	const writers, readers, rounds = 4, 4, 5000
	filters := []string{"sensors/+/temp", "sensors/a/temp", "sensors/#", "+/+/+", "#", "sensors/a/+"}
	var wg sync.WaitGroup
	start := make(chan struct{}) // released together so they overlap
	errs := make(chan string, readers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
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
		}()
	}
	var rwg sync.WaitGroup
	for range readers {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			<-start
			for range rounds {
				sawAlways := false
				tr.Match("sensors/a/temp", func(f, k string, v int) {
					if k == "always" {
						sawAlways = true
					}
					if !MatchFilter(f, "sensors/a/temp") {
						select {
						case errs <- "bad match " + f:
						default:
						}
					}
				})
				if !sawAlways {
					select {
					case errs <- "missed the permanent subscription":
					default:
					}
				}
				_ = tr.Len()
			}
		}()
	}
	close(start)
	wg.Wait()
	rwg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if tr.Len() != 1 {
		t.Fatalf("Len = %d, want 1", tr.Len())
	}
	tr.Remove("sensors/#", "always")
	if tr.nodeCount() != 0 {
		t.Fatalf("nodes = %d, want 0", tr.nodeCount())
	}
}

func TestRetainedConcurrent(t *testing.T) {
	r := NewRetained[int]()
	r.Set("sensors/fixed/temp", -1)
	const writers, readers, rounds = 4, 4, 5000
	var wg sync.WaitGroup
	start := make(chan struct{}) // released together so they overlap
	errs := make(chan string, readers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
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
		}()
	}
	var rwg sync.WaitGroup
	for range readers {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			<-start
			for range rounds {
				saw := false
				r.Match("sensors/+/#", func(topic string, v int) {
					if topic == "sensors/fixed/temp" {
						saw = true
					}
				})
				if !saw {
					select {
					case errs <- "missed the fixed topic":
					default:
					}
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	rwg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if r.Len() != 1 {
		t.Fatalf("Len = %d, want 1", r.Len())
	}
	r.Delete("sensors/fixed/temp")
	if r.nodeCount() != 0 {
		t.Fatalf("nodes = %d, want 0", r.nodeCount())
	}
}
