package fleet

import (
	"slices"
	"sync"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy"
)

func TestReplicasAcquireLeastOutstanding(t *testing.T) {
	ps := []policy.Policy{&fakePolicy{url: "a"}, &fakePolicy{url: "b"}, &fakePolicy{url: "c"}}
	r := New(ps)
	r.outstanding[0].Store(2)
	r.outstanding[1].Store(0)
	r.outstanding[2].Store(1)
	for range 5 {
		if i, p := r.acquire(); i != 1 || p.URL() != "b" {
			t.Fatalf("acquire = %d (%s), want the least loaded replica 1", i, p.URL())
		} else {
			r.release(i)
		}
	}
	i, _ := r.acquire() // 1 now has 1 outstanding, like 2
	if i != 1 || r.outstanding[1].Load() != 1 {
		t.Fatalf("acquire = %d", i)
	}
	j, _ := r.acquire()
	if j != 1 && j != 2 {
		t.Fatalf("acquire with 1 and 2 tied at 1 = %d", j)
	}
	k, _ := r.acquire()
	if k == 0 {
		t.Fatalf("acquire picked the busiest replica")
	}

	// Idle replicas are used in turn.
	r = New(ps)
	var got []int
	used := make([]int, 3)
	for range 6 {
		i, _ := r.acquire()
		r.release(i)
		got = append(got, i)
		used[i]++
	}
	if !slices.Equal(used, []int{2, 2, 2}) {
		t.Errorf("round-robin over idle replicas: %v", got)
	}

	// Concurrent use balances and returns to zero.
	r = New(ps)
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := make([]int, 3)
	for range 300 {
		wg.Go(func() {
			i, _ := r.acquire()
			mu.Lock()
			counts[i]++
			mu.Unlock()
			r.release(i)
		})
	}
	wg.Wait()
	for i := range 3 {
		if r.outstanding[i].Load() != 0 {
			t.Errorf("replica %d has %d outstanding after all releases", i, r.outstanding[i].Load())
		}
		if counts[i] == 0 {
			t.Errorf("replica %d never used: %v", i, counts)
		}
	}
}

// fakePolicy is a policy replica known only by its URL (the balancing and
// book-keeping tests read nothing else of it).
type fakePolicy struct {
	policy.Policy
	url string
}

func (p *fakePolicy) URL() string { return p.url }
