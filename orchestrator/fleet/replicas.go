package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/recipes"
)

// Replicas balances policy requests across replicas by least outstanding
// requests (ties go round-robin); a request with a pin key (CallKey) goes
// to the replica its key was pinned to while that replica is up, holds
// the weights and is not busier than the least-loaded by AffinityMargin.
//
// The set can grow while requests run (Add: a replica named in
// policy.endpoints_file) and replicas can leave it (Remove); indices are
// stable: a replica removed keeps its index, and one that comes back at
// the same URL takes it again, so the set grows only with the distinct
// URLs a run has seen.
type Replicas struct {
	// set is the replicas, append-only; readers load it without a lock.
	set  atomic.Pointer[[]*replica]
	next atomic.Uint64
	// Readmit, when set, brings a replica that is down back: it checks the
	// replica is healthy and serves the weights in use, loading them again
	// if it lost them; nil means keep it down.
	Readmit func(ctx context.Context, p policy.Policy) error
	// ReadmitFor is how long a drained replica is probed before it is
	// given up (0: 10 minutes); once every drained replica is given up
	// and none is up, calls fail instead of waiting.
	ReadmitFor time.Duration
	// mu guards each replica's probing flag and the growth of the set.
	mu sync.Mutex
	// book, when set, records which weights each replica holds (see
	// weightBook): a request needing given weights goes only to a replica
	// that holds them.
	book *weightBook
	// Affinity is policy.affinity (recipes.AffinityTrajectory,
	// AffinityGroup or AffinityNone; "": none): what PinKey keys a
	// request by.
	Affinity string
	// AffinityMargin is how many more requests in flight than the
	// least-loaded replica a pinned replica may have before its key is
	// pinned again to the least-loaded (below 1: 1).
	AffinityMargin int
	pins           pins
	// dynamic is set while WatchEndpoints keeps the set: with no replica
	// up, requests wait for one to be listed instead of failing.
	dynamic atomic.Bool
	// router, when set (UseRouter), carries CallFor's and CallKey's
	// requests; nil: they go to a replica picked here.
	router *routerMode
}

// replica is one policy server of the set.
type replica struct {
	p           policy.Policy
	outstanding atomic.Int64
	// down: drained, no request is sent to it until a probe re-admits it.
	down atomic.Bool
	// gone: removed from the set (its endpoint left policy.endpoints_file);
	// also down, and never probed until it is added again.
	gone atomic.Bool
	// probing is set while a probe runs for it (under Replicas.mu).
	probing bool
}

// New returns the replicas of ps, all up, with no request outstanding
// and no weight book (any replica serves any model).
func New(ps []policy.Policy) *Replicas {
	r := &Replicas{}
	set := make([]*replica, len(ps))
	for i, p := range ps {
		set[i] = &replica{p: p}
	}
	r.set.Store(&set)
	return r
}

// all returns the replicas, in index order (a snapshot: replicas added
// later are not in it).
func (r *Replicas) all() []*replica { return *r.set.Load() }

// at returns replica i.
func (r *Replicas) at(i int) *replica { return r.all()[i] }

// Len is the number of replicas the set has held (removed ones included:
// indices are stable).
func (r *Replicas) Len() int { return len(r.all()) }

// Policy returns replica i's client.
func (r *Replicas) Policy(i int) policy.Policy { return r.at(i).p }

// acquire picks the live replica with the fewest outstanding requests
// (ties round-robin; when every replica is down, any) and counts a request
// on it; call release after.
func (r *Replicas) acquire() (int, policy.Policy) {
	i, p, _ := r.acquireFor("", "")
	return i, p
}

// acquireFor is acquire among the replicas that hold the weights model
// names ("": any replica); ok is false, and nothing is counted, when model
// is weights the book tracks and no live replica holds them. A key (""
// none) goes to the replica it is pinned to unless that one is down,
// lacks the weights or has AffinityMargin more requests in flight than
// the least-loaded; then, or when it has no pin, it is pinned to the
// replica picked.
func (r *Replicas) acquireFor(model, key string) (int, policy.Policy, bool) {
	set := r.all()
	start := int(r.next.Add(1) % uint64(len(set)))
	best := -1
	for k := 0; k < len(set); k++ {
		i := (start + k) % len(set)
		if set[i].down.Load() || (model != "" && !r.book.has(i, model)) {
			continue
		}
		if best < 0 || set[i].outstanding.Load() < set[best].outstanding.Load() {
			best = i
		}
	}
	if best < 0 {
		if model != "" && r.book.tracks(model) {
			return -1, nil, false
		}
		best = start
	}
	if key != "" {
		best = r.pinFor(set, key, model, best)
	}
	set[best].outstanding.Add(1)
	return best, set[best].p, true
}

func (r *Replicas) release(i int) { r.at(i).outstanding.Add(-1) }

// pinFor is the replica a request keyed key goes to, given best, the
// least-loaded replica that can serve it: key's pinned replica while it
// can serve the request within the margin, else best, pinned anew.
func (r *Replicas) pinFor(set []*replica, key, model string, best int) int {
	r.pins.mu.Lock()
	defer r.pins.mu.Unlock()
	i, ok := r.pins.get(key)
	switch {
	case !ok:
		r.pins.made++
	case i == best:
		r.pins.hits++
		return i
	case i >= len(set) || set[i].down.Load() || (model != "" && !r.book.has(i, model)):
		r.pins.lost++
	case set[i].outstanding.Load()-set[best].outstanding.Load() < int64(max(r.AffinityMargin, 1)):
		r.pins.hits++
		return i
	default:
		r.pins.moved++
	}
	r.pins.set(key, best)
	return best
}

// PinKey is the key CallKey pins a request of a trajectory by under
// Affinity: the trajectory's id, its group's, or "" (balanced by load).
func (r *Replicas) PinKey(trajectory, group string) string {
	switch r.Affinity {
	case recipes.AffinityTrajectory:
		return trajectory
	case recipes.AffinityGroup:
		return group
	}
	return ""
}

// markDown drains replica i: no request is sent to it until a background
// probe re-admits it.
func (r *Replicas) markDown(i int) {
	rp := r.at(i)
	if rp.down.Swap(true) {
		return
	}
	r.pins.dropReplica(i)
	r.startProbe(i)
	r.resyncRouter()
}

// startProbe starts replica i's probe unless one runs, it was removed or
// nothing can re-admit it.
func (r *Replicas) startProbe(i int) {
	rp := r.at(i)
	r.mu.Lock()
	defer r.mu.Unlock()
	if rp.probing || r.Readmit == nil || rp.gone.Load() {
		return
	}
	rp.probing = true
	go r.probe(i)
}

// probe tries to re-admit replica i every 200 ms, for at most
// readmitFor.
func (r *Replicas) probe(i int) {
	rp := r.at(i)
	defer func() {
		r.mu.Lock()
		rp.probing = false
		r.mu.Unlock()
	}()
	deadline := time.Now().Add(r.readmitFor())
	for time.Now().Before(deadline) && !rp.gone.Load() {
		time.Sleep(200 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := rp.p.Health(ctx)
		if err == nil && r.Readmit != nil {
			err = r.Readmit(ctx, rp.p)
		}
		cancel()
		if err == nil && !rp.gone.Load() {
			rp.down.Store(false)
			r.resyncRouter()
			return
		}
	}
}

// Down reports whether replica i is drained (down, until a probe
// re-admits it) or removed.
func (r *Replicas) Down(i int) bool { return r.at(i).down.Load() }

// Gone reports whether replica i was removed (Remove) and not added
// again.
func (r *Replicas) Gone(i int) bool { return r.at(i).gone.Load() }

// live reports whether some replica is up.
func (r *Replicas) live() bool {
	for _, rp := range r.all() {
		if !rp.down.Load() {
			return true
		}
	}
	return false
}

// Call runs f on a replica; when the replica turns out to be down it is
// drained and f is tried on another (waiting for one to come back when all
// are down), so a replica that dies loses no trajectory. It is for the
// control calls (tokenize): in router mode too it goes to a replica
// directly.
func (r *Replicas) Call(ctx context.Context, f func(p policy.Policy) error) error {
	return r.callDirect(ctx, "", "", f)
}

// CallFor is call among the replicas that hold the weights model names
// ("": any replica); while none that is up holds them it waits for a
// drained one to come back, and fails, naming each replica and why, when
// none can (see awaitWeights). It is for generation and scoring: in
// router mode f runs on the router (see UseRouter).
func (r *Replicas) CallFor(ctx context.Context, model string, f func(p policy.Policy) error) error {
	return r.CallKey(ctx, model, "", f)
}

// CallKey is CallFor with the request pinned by key (see PinKey; "": by
// load alone): the calls of one key go to one replica while it is up,
// holds the weights and is within AffinityMargin of the least-loaded. A
// replica that turns out down releases its pins, and the retry pins the
// key again. In router mode key is the request's session
// (policy.SessionHeader) and the router keeps it on one replica.
func (r *Replicas) CallKey(ctx context.Context, model, key string, f func(p policy.Policy) error) error {
	if r.router != nil {
		return r.callRouter(ctx, model, key, f)
	}
	return r.callDirect(ctx, model, key, f)
}

// callDirect is CallKey on a replica picked here.
func (r *Replicas) callDirect(ctx context.Context, model, key string, f func(p policy.Policy) error) error {
	for attempt := 0; ; attempt++ {
		if err := r.awaitListed(ctx); err != nil {
			return err
		}
		i, p, ok := r.acquireFor(model, key)
		if !ok {
			if err := r.awaitWeights(ctx, model); err != nil {
				return err
			}
			continue
		}
		err := f(p)
		r.release(i)
		if err == nil || !policy.ReplicaDown(err) || ctx.Err() != nil || attempt >= 50 {
			return err
		}
		r.markDown(i)
		for !r.live() {
			if !r.anyProbing() && !r.awaitingList() {
				// Every probe gave up (ReadmitFor each): no replica will
				// come back. Without this check the call waited forever
				// (seen running: a vLLM whose engine died).
				return fmt.Errorf("every policy replica is down and none came back within %s: %w", r.readmitFor(), err)
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// awaitListed waits, while the set is kept by WatchEndpoints, until some
// replica is listed and not removed (WatchEndpoints says why it waits).
func (r *Replicas) awaitListed(ctx context.Context) error {
	for r.awaitingList() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waiting for policy.endpoints_file to list a policy server)", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// awaitingList reports whether the set is kept by WatchEndpoints and
// every replica was removed (the file lists none). It allocates nothing:
// every call checks it.
func (r *Replicas) awaitingList() bool {
	if !r.dynamic.Load() {
		return false
	}
	for _, rp := range r.all() {
		if !rp.gone.Load() {
			return false
		}
	}
	return true
}

// anyProbing reports whether a background probe may still re-admit a
// drained replica.
func (r *Replicas) anyProbing() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rp := range r.all() {
		if rp.probing {
			return true
		}
	}
	return false
}

// readmitFor is how long a drained replica is probed before it is given
// up (ReadmitFor, default 10 minutes).
func (r *Replicas) readmitFor() time.Duration {
	if r.ReadmitFor > 0 {
		return r.ReadmitFor
	}
	return 10 * time.Minute
}
