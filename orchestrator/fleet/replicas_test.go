package fleet

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
)

func TestReplicasAcquireLeastOutstanding(t *testing.T) {
	ps := []policy.Policy{&fakePolicy{url: "a"}, &fakePolicy{url: "b"}, &fakePolicy{url: "c"}}
	r := New(ps)
	r.at(0).outstanding.Store(2)
	r.at(1).outstanding.Store(0)
	r.at(2).outstanding.Store(1)
	for range 5 {
		if i, p := r.acquire(); i != 1 || p.URL() != "b" {
			t.Fatalf("acquire = %d (%s), want the least loaded replica 1", i, p.URL())
		} else {
			r.release(i)
		}
	}
	i, _ := r.acquire() // 1 now has 1 outstanding, like 2
	if i != 1 || r.at(1).outstanding.Load() != 1 {
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
		if r.at(i).outstanding.Load() != 0 {
			t.Errorf("replica %d has %d outstanding after all releases", i, r.at(i).outstanding.Load())
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

// deadPolicy is a replica whose server is gone: every call and health
// check is refused.
type deadPolicy struct{ fakePolicy }

func (p *deadPolicy) Health(context.Context) error { return syscall.ECONNREFUSED }

// When every replica is down and the probes that would re-admit them gave
// up, a call fails naming why, instead of waiting forever (seen running: a
// vLLM whose engine died left the run waiting with no end).
func TestCallFailsWhenNoReplicaComesBack(t *testing.T) {
	r := New([]policy.Policy{&deadPolicy{fakePolicy{url: "a"}}})
	r.Readmit = func(context.Context, policy.Policy) error { return nil }
	r.ReadmitFor = 300 * time.Millisecond
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- r.Call(context.Background(), func(policy.Policy) error {
			calls++
			return &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
		})
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "every policy replica is down") {
			t.Errorf("call: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call still waits 10 s after the only replica was given up")
	}
	if calls != 1 {
		t.Errorf("%d calls, want 1", calls)
	}
}
