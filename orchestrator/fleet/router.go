package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/router"
)

// routerMode is policy.router_url: generation and scoring (CallFor,
// CallKey) go through a router, which picks the replica; the control
// calls (Call: tokenize; the syncs' loads, health, models) go to each
// replica directly. The router's worker list follows the weight book:
// a replica is a member while it is up and holds every weights version
// some replica up holds, so the router never sends a request for weights
// to a replica that lacks them.
type routerMode struct {
	// data is the router's data plane: the policy client at its URL.
	data policy.Policy
	// admin edits its worker list.
	admin router.Router
	// mu serialises the syncs of the worker list.
	mu sync.Mutex
}

// UseRouter puts r in router mode (policy.router_url): data is the
// policy client at the router's URL, admin its worker-list client. Call it
// before the first request.
func (r *Replicas) UseRouter(data policy.Policy, admin router.Router) {
	r.router = &routerMode{data: data, admin: admin}
}

// Routed reports whether r is in router mode.
func (r *Replicas) Routed() bool { return r.router != nil }

// sessionPolicy is the router's data plane with a session id: its
// completions and scorings carry it as X-Session-ID (policy.WithSession),
// so that the router keeps the requests of one trajectory (or group) on
// one replica.
type sessionPolicy struct {
	policy.Policy
	id string
}

func (s sessionPolicy) Complete(ctx context.Context, req policy.CompletionRequest) (*policy.Completion, error) {
	return s.Policy.Complete(policy.WithSession(ctx, s.id), req)
}

func (s sessionPolicy) Score(ctx context.Context, model string, seq []int) ([]float64, error) {
	return s.Policy.Score(policy.WithSession(ctx, s.id), model, seq)
}

// callRouter is CallKey in router mode: f runs on the router's data
// plane with key as the session. While no replica up holds model it waits
// as CallKey does. A request the router could not serve (no worker
// reachable, or one lacking the weights: ReplicaDown) is tried again after
// the replicas are checked directly, those that fail drained and taken
// out of the router.
func (r *Replicas) callRouter(ctx context.Context, model, key string, f func(p policy.Policy) error) error {
	var p policy.Policy = r.router.data
	if key != "" {
		p = sessionPolicy{Policy: p, id: key}
	}
	for attempt := 0; ; attempt++ {
		if err := r.awaitListed(ctx); err != nil {
			return err
		}
		if model != "" && r.book.tracks(model) {
			if err := r.awaitWeights(ctx, model); err != nil {
				return err
			}
		}
		err := f(p)
		if err == nil || !policy.ReplicaDown(err) || ctx.Err() != nil || attempt >= 50 {
			if err != nil && policy.ReplicaDown(err) {
				return fmt.Errorf("through router %s: %w", r.router.admin.URL(), err)
			}
			return err
		}
		r.recheck(ctx, model)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// recheck checks every replica up directly (health; with tracked
// weights, that it lists them) and drains those that fail, which takes
// them out of the router: the router cannot say which replica failed a
// request.
func (r *Replicas) recheck(ctx context.Context, model string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	onEach(r.upIndices(), func(i int) {
		p := r.Policy(i)
		err := p.Health(ctx)
		if err == nil && model != "" && r.book.tracks(model) && r.book.has(i, model) {
			var models []string
			if models, err = p.Models(ctx); err == nil && !slices.Contains(models, r.book.wire(model)) {
				// It lost the weights (a restart): re-admission loads them.
				r.book.dropped(i, model)
				err = fmt.Errorf("does not list %s", model)
			}
		}
		if err != nil {
			r.markDown(i)
		}
	})
	r.resyncRouter()
}

// member reports whether replica i belongs in the router: up, and
// holding every weights version that some replica up holds.
func (r *Replicas) member(i int, up []int) bool {
	if !slices.Contains(up, i) {
		return false
	}
	if r.book == nil {
		return true
	}
	r.book.mu.Lock()
	defer r.book.mu.Unlock()
	for name := range r.book.tracked {
		if r.book.holds[i][name] {
			continue
		}
		for _, j := range up {
			if r.book.holds[j][name] {
				return false
			}
		}
	}
	return true
}

// SyncRouter makes the router's worker list hold exactly the replicas
// that are members (see member) among the set's, and fails when the
// router lists a worker the set never held while the run serves trained
// weights (a request routed there would lack them). No-op outside router
// mode.
func (r *Replicas) SyncRouter(ctx context.Context) error {
	return r.syncRouter(ctx, true)
}

// resyncRouter is SyncRouter after a change of the set or the book
// (a sync, a replica drained, re-admitted or removed); a failure to reach
// the router is left to the next change and to the data plane's retries.
func (r *Replicas) resyncRouter() {
	if r.router == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = r.syncRouter(ctx, false)
}

func (r *Replicas) syncRouter(ctx context.Context, strict bool) error {
	if r.router == nil {
		return nil
	}
	rm := r.router
	rm.mu.Lock()
	defer rm.mu.Unlock()
	listed, err := rm.admin.Workers(ctx)
	if err != nil {
		return fmt.Errorf("router %s: list workers: %w", rm.admin.URL(), err)
	}
	set := r.all()
	ours := make([]string, len(set))
	for i, rp := range set {
		ours[i] = rp.p.URL()
	}
	foreign, unlisted := router.Compare(listed, ours)
	up := r.upIndices()
	var errs []string
	for i, u := range ours {
		inRouter := !slices.Contains(unlisted, u)
		switch want := r.member(i, up); {
		case want && !inRouter:
			// Only a replica just found healthy is added: the router
			// blocks an add until the worker answers /health.
			if err := rm.admin.Add(ctx, u); err != nil {
				errs = append(errs, fmt.Sprintf("add %s: %v", u, err))
			}
		case !want && inRouter:
			if err := rm.admin.Remove(ctx, u); err != nil {
				errs = append(errs, fmt.Sprintf("remove %s: %v", u, err))
			}
		}
	}
	if strict && r.book != nil && len(foreign) > 0 {
		errs = append(errs, fmt.Sprintf("it routes to %s, not among policy.urls: requests sent there would lack this run's weights; remove them from the router or list them in policy.urls", strings.Join(foreign, ", ")))
	}
	if len(errs) > 0 {
		return fmt.Errorf("router %s: %s", rm.admin.URL(), strings.Join(errs, "; "))
	}
	return nil
}
