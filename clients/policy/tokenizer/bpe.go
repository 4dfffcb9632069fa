package tokenizer

import (
	"container/heap"
	"sync"
)

// merge is what one merge rule yields: its rank (lower merges first) and
// the id of the merged token.
type merge struct {
	rank, id int32
}

// pairKey is the key of the merge table: the ids of the two halves.
func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// smallWord is the longest piece (in bytes) merged by the quadratic scan;
// longer ones use a priority queue.
const smallWord = 48

// bpeScratch is the reusable state of one merge.
type bpeScratch struct {
	ids   []int32
	ranks []int32
	// for long words
	next, prev []int32
	queue      mergeQueue
}

// bpe appends the ids of one piece (its raw bytes) to dst.
func (m *model) bpe(dst []int, word string, pool *sync.Pool) []int {
	if len(word) == 1 {
		return append(dst, int(m.byteID[word[0]]))
	}
	if m.ignoreMerges {
		if id, ok := m.bytesToID[word]; ok {
			return append(dst, int(id))
		}
	}
	sc := pool.Get().(*bpeScratch)
	defer pool.Put(sc)
	if len(word) <= smallWord {
		return m.bpeSmall(dst, word, sc)
	}
	return m.bpeLarge(dst, word, sc)
}

const noMerge = int32(1<<31 - 1)

// rankOf is the merge of the pair (a, b), or noMerge.
func (m *model) rankOf(a, b int32) merge {
	if mg, ok := m.merges[pairKey(a, b)]; ok {
		return mg
	}
	return merge{rank: noMerge}
}

// bpeSmall merges by repeatedly scanning for the lowest-ranked adjacent
// pair (the leftmost among equals).
func (m *model) bpeSmall(dst []int, word string, sc *bpeScratch) []int {
	ids := sc.ids[:0]
	for i := 0; i < len(word); i++ {
		ids = append(ids, m.byteID[word[i]])
	}
	ranks := sc.ranks[:0]
	merged := sc.next[:0] // the merged id of each pair
	for i := 0; i+1 < len(ids); i++ {
		mg := m.rankOf(ids[i], ids[i+1])
		ranks = append(ranks, mg.rank)
		merged = append(merged, mg.id)
	}
	for len(ids) > 1 {
		best := 0
		for i := 1; i < len(ranks); i++ {
			if ranks[i] < ranks[best] {
				best = i
			}
		}
		if ranks[best] == noMerge {
			break
		}
		ids[best] = merged[best]
		ids = append(ids[:best+1], ids[best+2:]...)
		ranks = append(ranks[:best], ranks[best+1:]...)
		merged = append(merged[:best], merged[best+1:]...)
		if best > 0 {
			mg := m.rankOf(ids[best-1], ids[best])
			ranks[best-1], merged[best-1] = mg.rank, mg.id
		}
		if best < len(ranks) {
			mg := m.rankOf(ids[best], ids[best+1])
			ranks[best], merged[best] = mg.rank, mg.id
		}
	}
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	sc.ids, sc.ranks, sc.next = ids, ranks, merged
	return dst
}

// candidate is a possible merge in the queue of a long word: the symbols
// at left and its right neighbour, with the ids they had when queued.
type candidate struct {
	rank, pos   int32
	left, right int32 // ids when queued
	id          int32 // merged id
}

type mergeQueue []candidate

func (q mergeQueue) Len() int { return len(q) }
func (q mergeQueue) Less(i, j int) bool {
	if q[i].rank != q[j].rank {
		return q[i].rank < q[j].rank
	}
	return q[i].pos < q[j].pos
}
func (q mergeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *mergeQueue) Push(x any)   { *q = append(*q, x.(candidate)) }
func (q *mergeQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	*q = old[:len(old)-1]
	return c
}

// bpeLarge merges with a priority queue over a linked list of symbols, in
// the same order as bpeSmall: lowest rank first, then leftmost. A queued
// pair is stale when either side has merged since (its id changed: a merge
// always makes a longer token) or the left symbol is gone.
func (m *model) bpeLarge(dst []int, word string, sc *bpeScratch) []int {
	n := len(word)
	ids, next, prev := sc.ids[:0], sc.next[:0], sc.prev[:0]
	for i := 0; i < n; i++ {
		ids = append(ids, m.byteID[word[i]])
		next = append(next, int32(i+1))
		prev = append(prev, int32(i-1))
	}
	next[n-1] = -1
	q := sc.queue[:0]
	for i := 0; i+1 < n; i++ {
		if mg := m.rankOf(ids[i], ids[i+1]); mg.rank != noMerge {
			q = append(q, candidate{rank: mg.rank, pos: int32(i), left: ids[i], right: ids[i+1], id: mg.id})
		}
	}
	heap.Init(&q)
	const gone = -2
	for q.Len() > 0 {
		c := heap.Pop(&q).(candidate)
		r := next[c.pos]
		if prev[c.pos] == gone || r < 0 || ids[c.pos] != c.left || ids[r] != c.right {
			continue
		}
		// merge r into c.pos
		ids[c.pos] = c.id
		next[c.pos] = next[r]
		if next[r] >= 0 {
			prev[next[r]] = c.pos
		}
		prev[r] = gone
		if p := prev[c.pos]; p >= 0 {
			if mg := m.rankOf(ids[p], c.id); mg.rank != noMerge {
				heap.Push(&q, candidate{rank: mg.rank, pos: p, left: ids[p], right: c.id, id: mg.id})
			}
		}
		if nx := next[c.pos]; nx >= 0 {
			if mg := m.rankOf(c.id, ids[nx]); mg.rank != noMerge {
				heap.Push(&q, candidate{rank: mg.rank, pos: c.pos, left: c.id, right: ids[nx], id: mg.id})
			}
		}
	}
	for i := int32(0); i >= 0; i = next[i] {
		dst = append(dst, int(ids[i]))
	}
	sc.ids, sc.next, sc.prev, sc.queue = ids, next, prev, q
	return dst
}
