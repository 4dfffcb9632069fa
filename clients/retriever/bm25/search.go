package bm25

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
)

// scored is a ranked passage.
type scored struct {
	doc   uint32
	score float64
}

// cursor walks one query term's postings.
type cursor struct {
	w    float64 // query count × idf
	ub   float64 // w × the term's best saturated frequency
	pos  int     // the term's place in the query: the order scores sum in
	hdr  []byte  // the block table: nb × (last passage, end, best)
	data []byte
	nb   int
	blk  int // the decoded block
	n, i int // postings in the decoded block, the current one
	docs [blockSize]uint32
	tfs  [blockSize]uint32 // filled by decode, not by decodeDocs
	dls  [blockSize]uint32
	// The decoded block's counts and lengths as stored, with their
	// widths: read one by one where only a few are needed.
	tb, db []byte
	tw, dw int
	doc    uint32 // the current passage, endDoc past the last
}

func (c *cursor) last(b int) uint32 { return binary.LittleEndian.Uint32(c.hdr[12*b:]) }
func (c *cursor) end(b int) int     { return int(binary.LittleEndian.Uint32(c.hdr[12*b+4:])) }
func (c *cursor) best(b int) float64 {
	return float64(math.Float32frombits(binary.LittleEndian.Uint32(c.hdr[12*b+8:])))
}

// decode reads block b into docs, tfs and dls and moves to its first
// posting. A block whose widths and length disagree is a damaged index:
// a panic, which the search recovers as an error naming the index.
func (c *cursor) decode(b int) {
	n := c.decodeDocs(b)
	readFixed(c.tb, c.tw, c.tfs[:n])
	readFixed(c.db, c.dw, c.dls[:n])
}

// tfdl is the count and passage length of the decoded block's i-th
// posting, read from the block (valid after decode or decodeDocs).
func (c *cursor) tfdl(i int) (tf, dl uint32) {
	return fixedAt(c.tb, c.tw, i), fixedAt(c.db, c.dw, i)
}

// fixedAt is the i-th little-endian integer of w bytes in p.
func fixedAt(p []byte, w, i int) uint32 {
	switch w {
	case 1:
		return uint32(p[i])
	case 2:
		return uint32(binary.LittleEndian.Uint16(p[2*i:]))
	case 3:
		return uint32(p[3*i]) | uint32(p[3*i+1])<<8 | uint32(p[3*i+2])<<16
	}
	return binary.LittleEndian.Uint32(p[4*i:])
}

// decodeDocs reads block b's passages into docs, leaving its counts and
// lengths in the block (tfdl reads them), and moves to its first
// posting; it returns the block's postings.
func (c *cursor) decodeDocs(b int) int {
	start, prev := 0, uint32(0)
	if b > 0 {
		start, prev = c.end(b-1), c.last(b-1)
	}
	p := c.data[start:c.end(b)]
	kind := p[0]
	gw, tw, dw := int(kind&3)+1, int(kind>>2&3)+1, int(kind>>4&3)+1
	n := (len(p) - 1) / (gw + tw + dw)
	if kind>>6 != 0 || n == 0 || n > blockSize || 1+n*(gw+tw+dw) != len(p) {
		panic(fmt.Sprintf("posting block of %d bytes with widths byte %#x", len(p), kind))
	}
	g, t, d := p[1:1+n*gw], p[1+n*gw:1+n*(gw+tw)], p[1+n*(gw+tw):]
	switch gw {
	case 1:
		for k, x := range g {
			prev += uint32(x)
			c.docs[k] = prev
		}
	case 2:
		for k := range n {
			prev += uint32(binary.LittleEndian.Uint16(g[2*k:]))
			c.docs[k] = prev
		}
	default:
		readFixed(g, gw, c.docs[:n])
		for k := range n {
			prev += c.docs[k]
			c.docs[k] = prev
		}
	}
	c.tb, c.db, c.tw, c.dw = t, d, tw, dw
	c.blk, c.n, c.i = b, n, 0
	c.doc = c.docs[0]
	return n
}

// readFixed reads len(out) little-endian integers of w bytes from p.
func readFixed(p []byte, w int, out []uint32) {
	switch w {
	case 1:
		for k, x := range p[:len(out)] {
			out[k] = uint32(x)
		}
	case 2:
		for k := range out {
			out[k] = uint32(binary.LittleEndian.Uint16(p[2*k:]))
		}
	default: // three and four bytes: rare
		for k := range out {
			out[k] = fixedAt(p, w, k)
		}
	}
}

// next moves to the following posting.
func (c *cursor) next() {
	c.i++
	if c.i < c.n {
		c.doc = c.docs[c.i]
		return
	}
	if c.blk+1 < c.nb {
		c.decode(c.blk + 1)
		return
	}
	c.doc = endDoc
}

// blockFor is the block that holds the first posting at or after d (nb
// when none does), found in the block table without decoding.
func (c *cursor) blockFor(d uint32) int {
	b := c.blk
	if b < c.nb && c.last(b) >= d {
		return b
	}
	lo, hi := b+1, c.nb
	for lo < hi {
		mid := (lo + hi) / 2
		if c.last(mid) < d {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// seek moves to the first posting at or after d.
func (c *cursor) seek(d uint32) {
	if c.doc >= d {
		return
	}
	b := c.blockFor(d)
	if b >= c.nb {
		c.doc = endDoc
		return
	}
	if b != c.blk {
		c.decode(b)
	}
	for c.docs[c.i] < d {
		c.i++
	}
	c.doc = c.docs[c.i]
}

// topk keeps the k best (score, then lower passage) seen so far.
type topk struct {
	k     int
	h     []scored // a min-heap on (score, then higher passage)
	floor float64  // the k-th score once full, else -Inf
}

func worse(a, b scored) bool { return a.score < b.score || a.score == b.score && a.doc > b.doc }

// offer adds s if it beats the k-th. Passages come in increasing order,
// so a later passage with the k-th's score ranks below it: not added.
func (t *topk) offer(s scored) {
	if len(t.h) < t.k {
		t.h = append(t.h, s)
		for i := len(t.h) - 1; i > 0; {
			p := (i - 1) / 2
			if !worse(t.h[i], t.h[p]) {
				break
			}
			t.h[i], t.h[p] = t.h[p], t.h[i]
			i = p
		}
		if len(t.h) == t.k {
			t.floor = t.h[0].score
		}
		return
	}
	if s.score <= t.floor {
		return
	}
	t.h[0] = s
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(t.h) && worse(t.h[l], t.h[m]) {
			m = l
		}
		if r < len(t.h) && worse(t.h[r], t.h[m]) {
			m = r
		}
		if m == i {
			break
		}
		t.h[i], t.h[m] = t.h[m], t.h[i]
		i = m
	}
	t.floor = t.h[0].score
}

// ranked is the kept passages, best first.
func (t *topk) ranked() []scored {
	out := slices.Clone(t.h)
	slices.SortFunc(out, func(a, b scored) int {
		switch {
		case worse(b, a):
			return -1
		case worse(a, b):
			return 1
		}
		return 0
	})
	return out
}

// cut is the pruning cut for a k-th score of floor: a passage whose
// score is at most a bound at or below it cannot enter the top k, the
// margin covering the rounding of a sum in another order.
func cut(floor float64) float64 {
	return floor - 2e-9*math.Abs(floor) - 1e-300
}

// cursors analyses a query and opens its terms' postings, in query order.
func (ix *Index) cursors(text string) []*cursor {
	terms, _ := analyze(BoundQuery(text))
	var cs []*cursor
	for _, t := range terms {
		rec, ok := ix.lookup(t.term)
		if !ok {
			continue
		}
		postOff := binary.LittleEndian.Uint64(rec[8:])
		df := int(binary.LittleEndian.Uint32(rec[20:]))
		best := float64(math.Float32frombits(binary.LittleEndian.Uint32(rec[24:])))
		nb := (df + blockSize - 1) / blockSize
		hdr := ix.post[postOff : postOff+uint64(12*nb)]
		c := &cursor{w: float64(t.n) * idf(ix.m.Docs, df), pos: len(cs), hdr: hdr, nb: nb}
		c.data = ix.post[postOff+uint64(12*nb) : postOff+uint64(12*nb)+uint64(c.end(nb-1))]
		c.ub = c.w * best
		c.decode(0)
		cs = append(cs, c)
	}
	return cs
}

// search ranks the corpus for one query: MaxScore, or every passage of
// every term scored when exhaustive (the reference the tests and the
// benchmark compare with).
func (ix *Index) search(text string, k int, exhaustive bool) []scored {
	cs := ix.cursors(text)
	if len(cs) == 0 {
		return nil
	}
	t := &topk{k: k, floor: math.Inf(-1)}
	if exhaustive {
		// parts holds each term's share of the current passage's
		// score, in query order, summed in that order.
		parts := make([]float64, len(cs))
		for {
			d := endDoc
			for _, c := range cs {
				d = min(d, c.doc)
			}
			if d == endDoc {
				return t.ranked()
			}
			for _, c := range cs {
				parts[c.pos] = 0
				if c.doc == d {
					parts[c.pos] = c.w * ix.tfSat(c.tfs[c.i], c.dls[c.i])
					c.next()
				}
			}
			sum := 0.0
			for _, p := range parts {
				sum += p
			}
			t.offer(scored{d, sum})
		}
	}
	// Terms by bound, least first; prefix[i] bounds terms 0..i together.
	slices.SortStableFunc(cs, func(a, b *cursor) int {
		switch {
		case a.ub < b.ub:
			return -1
		case a.ub > b.ub:
			return 1
		}
		return 0
	})
	prefix := make([]float64, len(cs))
	run := 0.0
	for i, c := range cs {
		run += c.ub
		prefix[i] = run
	}
	// A scratch goes back to the pool with its bit set clear, on return
	// (not after a panic on a damaged index: that one is dropped).
	sc := scratchPool.Get().(*scratch)
	sc.size(len(cs))
	W := uint32(window)
	ess := 0            // terms [0, ess) are non-essential: together they cannot reach the k-th
	thr := cut(t.floor) // the pruning threshold: a bound at or below it cannot reach the k-th score
	for {
		// The next window: from the first essential passage, W passages.
		base := endDoc
		for _, c := range cs[ess:] {
			base = min(base, c.doc)
		}
		if base == endDoc {
			scratchPool.Put(sc)
			return t.ranked()
		}
		end := min(uint64(base)+uint64(W), uint64(endDoc))
		rest := 0.0 // the non-essential terms' bound
		if ess > 0 {
			rest = prefix[ess-1]
		}
		if !math.IsInf(thr, -1) {
			// Block-max skip: the best of each essential term's blocks
			// that reach into the window, with the non-essential bound;
			// when that cannot beat the k-th, no passage of the window
			// can.
			bound := rest
			for _, c := range cs[ess:] {
				if uint64(c.doc) >= end {
					continue
				}
				b, best := c.blk, c.best(c.blk)
				for b+1 < c.nb && uint64(c.last(b))+1 < end {
					b++
					best = max(best, c.best(b))
				}
				bound += c.w * best
			}
			if bound <= thr {
				for _, c := range cs[ess:] {
					if uint64(c.doc) < end {
						c.seek(uint32(end))
					}
				}
				continue
			}
		}
		// Term at a time: each essential term's shares of the window's
		// passages, kept by term and summed (in any order: only a bound).
		for _, c := range cs[ess:] {
			sc.accumulate(ix, c, base, end)
		}
		// Then the non-essential terms, largest bound first, each added
		// only to the passages it can still lift over the k-th.
		// The first is added without a pass of its own over the
		// passages: each of its postings checks its passage's bound.
		for i := ess - 1; i >= 0; i-- {
			if i < ess-1 && sc.filter(prefix[i], thr) == 0 {
				break
			}
			sc.add(ix, cs[i], base, end, thr-prefix[i])
		}
		// The passages that can still beat the k-th, in order, with
		// their exact score: the shares summed in query order.
		for wi, word := range sc.touched[:(uint64(W)+63)/64] {
			sc.touched[wi] = 0
			for word != 0 {
				j := wi*64 + bits.TrailingZeros64(word)
				word &= word - 1
				bound, mask := sc.slot[j].acc, sc.slot[j].mask
				if bound <= thr {
					continue
				}
				s := 0.0
				for m := mask; m != 0; m &= m - 1 {
					s += sc.share[bits.TrailingZeros64(m)*window+j]
				}
				t.offer(scored{base + uint32(j), s})
				if c := cut(t.floor); c > thr {
					thr = c
				}
			}
		}
		for ess < len(cs) && prefix[ess] <= thr {
			ess++
		}
	}
}

// window is how many passages MaxScore scores at a time, term by term (a
// variable so that the tests can cross many windows on a small corpus).
var window = 2048

// scratch is one search's window: per passage (its offset in the window)
// the sum of the shares found so far, which terms matched, and each
// term's share; touched marks the passages still in the running, and
// only theirs are valid (the others are stale, never cleared).
type scratch struct {
	slot    []slot
	touched []uint64
	share   []float64 // term (query place) × window
}

// slot is a passage's running sum and term mask, side by side: one cache
// line holds both.
type slot struct {
	acc  float64
	mask uint64
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// size readies the scratch for terms query terms in windows of window
// passages.
func (s *scratch) size(terms int) {
	if len(s.slot) != window {
		*s = scratch{slot: make([]slot, window), touched: make([]uint64, (window+63)/64)}
	}
	if n := terms * window; len(s.share) < n {
		s.share = make([]float64, n)
	}
}

// accumulate adds c's shares of the passages in [base, end) to the
// window, leaving c at its first posting at or after end.
func (s *scratch) accumulate(ix *Index, c *cursor, base uint32, end uint64) {
	bit := uint64(1) << c.pos
	row := s.share[c.pos*window : (c.pos+1)*window]
	for uint64(c.doc) < end {
		i, n := c.i, c.n
		for ; i < n && uint64(c.docs[i]) < end; i++ {
			// A passage not yet touched in this window holds stale
			// values: overwritten, without a branch (its sum's bits
			// masked to +0, and +0 + p is p).
			j := c.docs[i] - base
			p := c.w * ix.tfSat(c.tfs[i], c.dls[i])
			w, sh := j>>6, j&63
			keep := -(s.touched[w] >> sh & 1)
			row[j] = p
			sl := &s.slot[j]
			sl.acc = math.Float64frombits(math.Float64bits(sl.acc)&keep) + p
			sl.mask = sl.mask&keep | bit
			s.touched[w] |= 1 << sh
		}
		if i < n {
			c.i, c.doc = i, c.docs[i]
			return
		}
		if c.blk+1 >= c.nb {
			c.doc = endDoc
			return
		}
		c.decode(c.blk + 1)
	}
}

// filter drops the window's passages whose shares so far and bound
// cannot beat thr, returning how many are left.
func (s *scratch) filter(bound, thr float64) int {
	n := 0
	for wi, word := range s.touched {
		keep := uint64(0)
		for m := word; m != 0; m &= m - 1 {
			tz := bits.TrailingZeros64(m)
			var k uint64
			if s.slot[wi*64+tz].acc+bound > thr {
				k = 1
			}
			keep |= k << tz
		}
		s.touched[wi] = keep
		n += bits.OnesCount64(keep)
	}
	return n
}

// any reports whether a passage in [lo, hi) of the window is still in
// the running.
func (s *scratch) any(lo, hi uint32) bool {
	last := (hi - 1) >> 6
	for w := lo >> 6; w <= last; w++ {
		m := s.touched[w]
		if w == lo>>6 {
			m &= ^uint64(0) << (lo & 63)
		}
		if w == last {
			m &= ^uint64(0) >> (63 - (hi-1)&63)
		}
		if m != 0 {
			return true
		}
	}
	return false
}

// add adds c's shares to the passages of [base, end) still in the
// running whose shares so far exceed floor, decoding only the blocks that
// hold passages still in the running (their passages only: the few
// matches' counts and lengths are read from the block). c is left in the
// last block it reached, at its first posting not walked.
func (s *scratch) add(ix *Index, c *cursor, base uint32, end uint64, floor float64) {
	bit := uint64(1) << c.pos
	row := s.share[c.pos*window : (c.pos+1)*window]
	for b := c.blockFor(base); b < c.nb; b++ {
		lo := base
		if b > 0 {
			lo = max(lo, c.last(b-1)+1)
		}
		if uint64(lo) >= end {
			return
		}
		hi := min(uint64(c.last(b))+1, end)
		if s.any(lo-base, uint32(hi-uint64(base))) {
			if b != c.blk {
				c.decodeDocs(b)
			}
			i := c.i
			for i < c.n && c.docs[i] < base {
				i++
			}
			for ; i < c.n && uint64(c.docs[i]) < end; i++ {
				j := c.docs[i] - base
				if sl := &s.slot[j]; s.touched[j>>6]&(1<<(j&63)) != 0 && sl.acc > floor {
					p := c.w * ix.tfSat(c.tfdl(i))
					row[j] = p
					sl.acc += p
					sl.mask |= bit
				}
			}
			c.i = i
			if i < c.n {
				c.doc = c.docs[i]
			}
		}
		if uint64(c.last(b)) >= end {
			return
		}
	}
}
