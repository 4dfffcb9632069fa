package fleet

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
)

// weightBook records which weights each policy replica holds, so that a
// request needing given weights (a sampling or scoring request naming
// them) goes only to a replica that has them. It tracks the base model and
// every weights name the run synced; other model names (a teacher served
// under its own name) are not tracked and any replica may serve them.
type weightBook struct {
	// base is policy.model, the name the servers serve their own weights
	// under.
	base string
	// inPlace is set when new weights replace a replica's weights under the
	// base name (sglang_disk): a replica holds one version at a time, and
	// requests name the base model whatever the version.
	inPlace bool

	mu      sync.Mutex
	tracked map[string]bool
	holds   []map[string]bool   // per replica: the weights it holds
	why     []map[string]string // per replica: why it lacks weights (a load's error)
}

// newWeightBook starts a book of n replicas, each holding the base
// weights.
func newWeightBook(base string, inPlace bool, n int) *weightBook {
	b := &weightBook{base: base, inPlace: inPlace, tracked: map[string]bool{base: true},
		holds: make([]map[string]bool, n), why: make([]map[string]string, n)}
	for i := range n {
		b.holds[i] = map[string]bool{base: true}
		b.why[i] = map[string]string{}
	}
	return b
}

// grow makes room for replicas up to n, each new one holding the base
// weights (what a server that just started serves).
func (b *weightBook) grow(n int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.holds) < n {
		b.holds = append(b.holds, map[string]bool{b.base: true})
		b.why = append(b.why, map[string]string{})
	}
}

// has reports whether replica i can serve a request needing model. A nil
// book tracks nothing.
func (b *weightBook) has(i int, model string) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.tracked[model] || b.holds[i][model]
}

// tracks reports whether model names weights the book tracks.
func (b *weightBook) tracks(model string) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tracked[model]
}

// wire is the model name a request for model sends: the base name for any
// version held in place, model itself otherwise.
func (b *weightBook) wire(model string) string {
	if b == nil || !b.inPlace {
		return model
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tracked[model] {
		return b.base
	}
	return model
}

// track adds a weights name to the book.
func (b *weightBook) track(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tracked[name] = true
}

// loaded records that replica i now holds name (in place: only name).
func (b *weightBook) loaded(i int, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tracked[name] = true
	if b.inPlace {
		b.holds[i] = map[string]bool{}
		b.why[i] = map[string]string{}
	}
	b.holds[i][name] = true
	delete(b.why[i], name)
}

// failed records that replica i failed to load name. In place, what it
// holds after a failed load is unknown: it serves no tracked weights until
// a load succeeds.
func (b *weightBook) failed(i int, name string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tracked[name] = true
	if b.inPlace {
		b.holds[i] = map[string]bool{}
	}
	delete(b.holds[i], name)
	b.why[i][name] = err.Error()
}

// dropped records that replica i no longer holds name (an adapter
// unloaded).
func (b *weightBook) dropped(i int, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.holds[i], name)
	delete(b.why[i], name)
}

// reset records that replica i holds exactly names (a replica that
// restarted serves its base weights only).
func (b *weightBook) reset(i int, names ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holds[i] = map[string]bool{}
	for _, n := range names {
		b.holds[i][n] = true
		b.tracked[n] = true
	}
}

// holdsNames lists the tracked weights replica i holds, sorted.
func (b *weightBook) holdsNames(i int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.holds[i]))
}

// reason says why replica i lacks model ("" when no load of it failed).
func (b *weightBook) reason(i int, model string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.why[i][model]
}

// Wire is the model name to send for a request needing model (see
// weightBook.wire).
func (r *Replicas) Wire(model string) string { return r.book.wire(model) }

// upIndices lists the replicas not drained.
func (r *Replicas) upIndices() []int {
	var out []int
	for i, rp := range r.all() {
		if !rp.down.Load() {
			out = append(out, i)
		}
	}
	return out
}

// indexOf is the index of replica p (-1 when it is not one).
func (r *Replicas) indexOf(p policy.Policy) int {
	for i, rp := range r.all() {
		if rp.p == p {
			return i
		}
	}
	return -1
}

// anyDrained reports whether some replica is drained (down, not
// removed): one a probe may re-admit.
func (r *Replicas) anyDrained() bool {
	for _, rp := range r.all() {
		if rp.down.Load() && !rp.gone.Load() {
			return true
		}
	}
	return false
}

// holder reports whether some replica that is up holds model.
func (r *Replicas) holder(model string) bool {
	for _, i := range r.upIndices() {
		if r.book.has(i, model) {
			return true
		}
	}
	return false
}

// AllHold reports whether every replica that is up holds model (and one
// is up).
func (r *Replicas) AllHold(model string) bool {
	up := r.upIndices()
	for _, i := range up {
		if !r.book.has(i, model) {
			return false
		}
	}
	return len(up) > 0
}

// awaitWeights returns once some replica that is up holds model. While a
// replica is drained it waits (re-admission gives a replica the weights in
// use); when none is, no replica can come to hold model and it fails with
// r.missing(model).
func (r *Replicas) awaitWeights(ctx context.Context, model string) error {
	for {
		if r.holder(model) {
			return nil
		}
		if r.Readmit == nil || !r.anyDrained() {
			return r.missing(model)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waiting for a policy replica holding weights %s)", ctx.Err(), model)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// missing is the error of a request needing weights no replica holds: it
// names each replica and why it lacks them.
func (r *Replicas) missing(model string) error {
	var why []string
	for i, rp := range r.all() {
		p := rp.p
		var w string
		switch {
		case rp.gone.Load():
			w = "removed (its endpoint left policy.endpoints_file)"
		case rp.down.Load():
			w = "drained (not healthy); re-admitted once healthy and holding the weights in use"
		case r.book.reason(i, model) != "":
			w = "failed to load them: " + r.book.reason(i, model)
		default:
			if h := r.book.holdsNames(i); len(h) > 0 {
				w = "holds " + strings.Join(h, ", ")
			} else {
				w = "holds no known weights (its last load failed)"
			}
		}
		why = append(why, p.URL()+": "+w)
	}
	return fmt.Errorf("no policy replica holds weights %s: %s", model, strings.Join(why, "; "))
}

// SampledBy records which replica sampled with which weights during a
// step's rollouts. A nil *SampledBy records nothing.
type SampledBy struct {
	mu sync.Mutex
	m  map[string]string
}

// Note records that replica url sampled with weights model.
func (s *SampledBy) Note(url, model string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]string{}
	}
	if prev, ok := s.m[url]; ok && prev != model && !slices.Contains(strings.Split(prev, ","), model) {
		// One step samples one model; should a replica serve two, both
		// show, sorted.
		names := append(strings.Split(prev, ","), model)
		sort.Strings(names)
		model = strings.Join(names, ",")
	}
	s.m[url] = model
}

// Snapshot returns a copy of the record (nil when nothing was sampled).
func (s *SampledBy) Snapshot() map[string]string {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) == 0 {
		return nil
	}
	return maps.Clone(s.m)
}
