package fleet

import "sync"

// maxPins bounds the pins kept: past it the oldest pin is dropped (its
// trajectory, if still running, is pinned again by load). A pin is a few
// dozen bytes, and 65,536 is over 25 paper-scale steps (2,560
// trajectories each) in flight at once.
const maxPins = 1 << 16

// pins maps a trajectory's (or group's) key to the replica it is pinned
// to, oldest first in a ring so that the map stays bounded.
type pins struct {
	mu    sync.Mutex
	to    map[string]pin
	order []pinned // ring of insertions; order[head] is the oldest
	head  int
	seq   uint64
	// counts since New: requests sent to their pinned replica, pins made,
	// pins moved because the pinned replica was busier by the margin, and
	// pins moved because it was down or lacked the weights.
	hits, made, moved, lost int64
}

type pin struct {
	replica int
	seq     uint64
}

type pinned struct {
	key string
	seq uint64
}

// get returns the replica key is pinned to.
func (p *pins) get(key string) (int, bool) {
	v, ok := p.to[key]
	return v.replica, ok
}

// set pins key to replica i, dropping the oldest pin past maxPins.
func (p *pins) set(key string, i int) {
	if p.to == nil {
		p.to = map[string]pin{}
	}
	p.seq++
	p.to[key] = pin{replica: i, seq: p.seq}
	if len(p.order) < maxPins {
		p.order = append(p.order, pinned{key, p.seq})
		return
	}
	old := p.order[p.head]
	if v, ok := p.to[old.key]; ok && v.seq == old.seq {
		delete(p.to, old.key)
	}
	p.order[p.head] = pinned{key, p.seq}
	p.head = (p.head + 1) % maxPins
}

// dropReplica releases every pin to replica i (drained or given up).
func (p *pins) dropReplica(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, v := range p.to {
		if v.replica == i {
			delete(p.to, k)
		}
	}
}

// AffinityStats counts how pinned requests were placed since the
// replicas were made: Hits went to their pinned replica, Pinned made a
// new pin, Moved re-pinned because the pinned replica had the margin more
// requests in flight than the least-loaded one, Lost re-pinned because it
// was down or lacked the request's weights. Pins is how many are held.
type AffinityStats struct {
	Hits, Pinned, Moved, Lost int64
	Pins                      int
}

// AffinityStats reports the pins' counters (all zero with affinity off).
func (r *Replicas) AffinityStats() AffinityStats {
	r.pins.mu.Lock()
	defer r.pins.mu.Unlock()
	return AffinityStats{Hits: r.pins.hits, Pinned: r.pins.made, Moved: r.pins.moved, Lost: r.pins.lost, Pins: len(r.pins.to)}
}
