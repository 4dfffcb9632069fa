package fleet

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/recipes"
)

func threeReplicas() *Replicas {
	return New([]policy.Policy{&fakePolicy{url: "a"}, &fakePolicy{url: "b"}, &fakePolicy{url: "c"}})
}

// A key's requests go to the replica of its first request while that one
// is within the margin of the least-loaded; past it the key is pinned to
// the least-loaded one and stays there.
func TestAffinityPinsAndRepinsPastTheMargin(t *testing.T) {
	r := threeReplicas()
	r.Affinity, r.AffinityMargin = recipes.AffinityTrajectory, 2
	first, _, _ := r.acquireFor("", "traj-1")
	r.release(first)
	for range 5 {
		i, _, _ := r.acquireFor("", "traj-1")
		r.release(i)
		if i != first {
			t.Fatalf("traj-1 went to %d, pinned to %d", i, first)
		}
	}
	// One more in flight on the pinned replica than the others: within
	// the margin of 2.
	r.at(first).outstanding.Store(1)
	if i, _, _ := r.acquireFor("", "traj-1"); i != first {
		t.Fatalf("at 1 more in flight traj-1 went to %d, pinned to %d", i, first)
	} else {
		r.release(i)
	}
	// Two more: re-pinned to the least-loaded, and kept there.
	r.at(first).outstanding.Store(2)
	moved, _, _ := r.acquireFor("", "traj-1")
	r.release(moved)
	if moved == first {
		t.Fatalf("at the margin traj-1 stayed on %d", first)
	}
	r.at(first).outstanding.Store(0)
	if i, _, _ := r.acquireFor("", "traj-1"); i != moved {
		t.Fatalf("after the move traj-1 went to %d, pinned to %d", i, moved)
	}
	s := r.AffinityStats()
	if s.Pinned != 1 || s.Moved != 1 || s.Hits != 7 || s.Lost != 0 || s.Pins != 1 {
		t.Errorf("stats %+v, want 1 pinned, 1 moved, 7 hits, 1 pin held", s)
	}
}

// Keys spread by load: a new key goes to the least-loaded replica, so
// many trajectories are pinned evenly.
func TestAffinityNewKeysBalance(t *testing.T) {
	r := threeReplicas()
	r.Affinity, r.AffinityMargin = recipes.AffinityTrajectory, 4
	count := make([]int, 3)
	held := []int{}
	for k := range 30 {
		i, _, _ := r.acquireFor("", fmt.Sprintf("traj-%d", k))
		count[i]++
		held = append(held, i)
	}
	for i, c := range count {
		if c != 10 {
			t.Errorf("replica %d got %d of 30 new keys in flight: %v", i, c, count)
		}
	}
	for _, i := range held {
		r.release(i)
	}
}

// A replica drained releases its pins, and a pin never sends a request to
// a replica that lacks the weights it needs.
func TestAffinityDownAndWeights(t *testing.T) {
	r := threeReplicas()
	r.Affinity = recipes.AffinityTrajectory
	i, _, _ := r.acquireFor("", "traj-1")
	r.release(i)
	r.markDown(i)
	if s := r.AffinityStats(); s.Pins != 0 {
		t.Fatalf("a drained replica kept %d pins", s.Pins)
	}
	j, _, _ := r.acquireFor("", "traj-1")
	r.release(j)
	if j == i {
		t.Fatalf("traj-1 went to drained replica %d", i)
	}

	// Weights: step-2 is on replica 2 only; a key pinned to 0 moves.
	r = threeReplicas()
	r.Affinity = recipes.AffinityTrajectory
	r.book = newWeightBook("base", false, 3)
	r.book.mu.Lock()
	r.book.tracked["step-2"] = true
	r.book.holds[2]["step-2"] = true
	r.book.mu.Unlock()
	r.at(1).outstanding.Store(5)
	r.at(2).outstanding.Store(5)
	if k, _, _ := r.acquireFor("base", "traj-2"); k != 0 {
		t.Fatalf("traj-2 on the base weights went to %d, want the idle replica 0", k)
	} else {
		r.release(k)
	}
	k, _, ok := r.acquireFor("step-2", "traj-2")
	if !ok || k != 2 {
		t.Fatalf("traj-2 on step-2 went to %d (ok %v), want 2, the only replica holding it", k, ok)
	}
	r.release(k)
	if s := r.AffinityStats(); s.Lost != 1 {
		t.Errorf("stats %+v, want 1 pin lost to the weights", s)
	}
}

// CallKey retries a key whose replica died on another, pinned there.
func TestCallKeyRepinsAfterAReplicaDies(t *testing.T) {
	dead := &deadPolicy{fakePolicy{url: "dead"}}
	live := &fakePolicy{url: "live"}
	r := New([]policy.Policy{dead, live})
	r.Affinity = recipes.AffinityTrajectory
	var got []string
	for range 3 {
		err := r.CallKey(context.Background(), "", "traj-1", func(p policy.Policy) error {
			got = append(got, p.URL())
			if p == policy.Policy(dead) {
				return &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"live", "live", "live"}
	if got[0] == "dead" {
		want = []string{"dead", "live", "live", "live"}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("calls went to %v, want %v", got, want)
	}
}

// The pins stay bounded: past maxPins the oldest are dropped.
func TestAffinityPinsBounded(t *testing.T) {
	r := threeReplicas()
	r.Affinity = recipes.AffinityTrajectory
	for k := range maxPins + 100 {
		i, _, _ := r.acquireFor("", fmt.Sprintf("traj-%d", k))
		r.release(i)
	}
	if s := r.AffinityStats(); s.Pins != maxPins {
		t.Errorf("%d pins held, want the bound %d", s.Pins, maxPins)
	}
	r.pins.mu.Lock()
	_, oldest := r.pins.to["traj-0"]
	_, newest := r.pins.to[fmt.Sprintf("traj-%d", maxPins+99)]
	r.pins.mu.Unlock()
	if oldest || !newest {
		t.Errorf("oldest pin kept %v, newest kept %v", oldest, newest)
	}
}

func TestPinKey(t *testing.T) {
	r := threeReplicas()
	for mode, want := range map[string]string{recipes.AffinityTrajectory: "t", recipes.AffinityGroup: "g", recipes.AffinityNone: "", "": ""} {
		r.Affinity = mode
		if got := r.PinKey("t", "g"); got != want {
			t.Errorf("PinKey under %q = %q, want %q", mode, got, want)
		}
	}
}
