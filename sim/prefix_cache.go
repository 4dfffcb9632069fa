package sim

import "sync"

// prefixBlock is the block size of the simulated prefix cache, as vLLM's
// KV-cache blocks.
const prefixBlock = 16

// prefixCache emulates vLLM's automatic prefix caching: the KV blocks of
// sequences a replica processed are kept (up to a bound, oldest evicted
// first), so a prompt that starts with them is prefilled only past them. A
// block is known by the hash of its tokens chained with its predecessors'.
type prefixCache struct {
	mu    sync.Mutex
	set   map[uint64]struct{}
	ring  []uint64
	next  int
	limit int
}

func newPrefixCache(limit int) *prefixCache {
	return &prefixCache{set: map[uint64]struct{}{}, limit: limit}
}

// chain returns the chained hashes of ids' full blocks.
func chain(ids []int) []uint64 {
	out := make([]uint64, 0, len(ids)/prefixBlock)
	h := uint64(14695981039346656037)
	for i := 0; i+prefixBlock <= len(ids); i += prefixBlock {
		for _, id := range ids[i : i+prefixBlock] {
			for k := 0; k < 4; k++ {
				h ^= uint64(byte(id >> (8 * k)))
				h *= 1099511628211
			}
		}
		out = append(out, h)
	}
	return out
}

// cached returns how many leading tokens of ids are in cached blocks.
func (c *prefixCache) cached(ids []int) int {
	hs := chain(ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, h := range hs {
		if _, ok := c.set[h]; !ok {
			break
		}
		n++
	}
	return n * prefixBlock
}

// insert caches ids' full blocks.
func (c *prefixCache) insert(ids []int) {
	hs := chain(ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range hs {
		if _, ok := c.set[h]; ok {
			continue
		}
		if len(c.ring) < c.limit {
			c.ring = append(c.ring, h)
		} else {
			delete(c.set, c.ring[c.next])
			c.ring[c.next] = h
			c.next = (c.next + 1) % c.limit
		}
		c.set[h] = struct{}{}
	}
}
