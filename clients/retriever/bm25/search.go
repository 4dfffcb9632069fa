package bm25

import (
	"encoding/binary"
	"math"
	"slices"
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
	tfs  [blockSize]uint32
	dls  [blockSize]uint32
	doc  uint32 // the current passage, endDoc past the last
}

func (c *cursor) last(b int) uint32 { return binary.LittleEndian.Uint32(c.hdr[12*b:]) }
func (c *cursor) end(b int) int     { return int(binary.LittleEndian.Uint32(c.hdr[12*b+4:])) }
func (c *cursor) best(b int) float64 {
	return float64(math.Float32frombits(binary.LittleEndian.Uint32(c.hdr[12*b+8:])))
}

// decode reads block b into docs and tfs and moves to its first posting.
func (c *cursor) decode(b int) {
	start, prev := 0, uint32(0)
	if b > 0 {
		start, prev = c.end(b-1), c.last(b-1)
	}
	p := c.data[start:c.end(b)]
	n, i := 0, 0
	for i < len(p) && n < blockSize {
		// The one-byte forms (nearly every gap and count) inline.
		var d, tf, dl uint32
		if b := p[i]; b < 0x80 {
			d, i = uint32(b), i+1
		} else {
			d, i = uvarint32(p, i)
		}
		if b := p[i]; b < 0x80 {
			tf, i = uint32(b), i+1
		} else {
			tf, i = uvarint32(p, i)
		}
		if b := p[i]; b < 0x80 {
			dl, i = uint32(b), i+1
		} else {
			dl, i = uvarint32(p, i)
		}
		prev += d
		c.docs[n], c.tfs[n], c.dls[n] = prev, tf, dl
		n++
	}
	c.blk, c.n, c.i = b, n, 0
	c.doc = c.docs[0]
}

// uvarint32 reads the uvarint at p[i] (one the build wrote: at most five
// bytes, under 2³²), returning it and the index after it; the one- and
// two-byte forms, nearly every posting's, without a loop.
func uvarint32(p []byte, i int) (uint32, int) {
	b := p[i]
	if b < 0x80 {
		return uint32(b), i + 1
	}
	x := uint32(b & 0x7f)
	b = p[i+1]
	if b < 0x80 {
		return x | uint32(b)<<7, i + 2
	}
	x |= uint32(b&0x7f) << 7
	for s, j := 14, i+2; ; s, j = s+7, j+1 {
		b = p[j]
		if b < 0x80 {
			return x | uint32(b)<<s, j + 1
		}
		x |= uint32(b&0x7f) << s
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
	// parts holds each term's share of the current passage's score, in
	// query order, summed in that order once the passage is kept.
	parts := make([]float64, len(cs))
	score := func() float64 {
		s := 0.0
		for _, p := range parts {
			s += p
		}
		return s
	}
	t := &topk{k: k, floor: math.Inf(-1)}
	if exhaustive {
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
					parts[c.pos] = c.w * sat(c.tfs[c.i], ix.norm(c.dls[c.i]))
					c.next()
				}
			}
			t.offer(scored{d, score()})
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
	ess := 0 // terms [0, ess) are non-essential: together they cannot reach the k-th
	// The block-max window (see below): its last passage and bound, and
	// the k-th score and essential terms it was computed for.
	win, winBound, winFloor, winEss := uint32(0), 0.0, 0.0, 0
	thr := cut(t.floor) // the pruning threshold: a bound at or below it cannot reach the k-th score
	for {
		d := endDoc
		for _, c := range cs[ess:] {
			d = min(d, c.doc)
		}
		if d == endDoc {
			return t.ranked()
		}
		rest := 0.0 // the non-essential terms' bound
		if ess > 0 {
			rest = prefix[ess-1]
		}
		if !math.IsInf(thr, -1) {
			// Block-max window: the essential terms' current blocks
			// hold every passage from d to w, the first of them to end;
			// when their bests with the non-essential bound cannot beat
			// the k-th, none of those passages can: skip past w,
			// decoding only the blocks skipped into. The bound holds
			// for the whole window, so it is computed once per window
			// (and again when the k-th or the essential terms change).
			if d > win || thr != winFloor || ess != winEss {
				win, winBound, winFloor, winEss = endDoc, rest, thr, ess
				for _, c := range cs[ess:] {
					if c.doc != endDoc {
						win = min(win, c.last(c.blk))
						winBound += c.w * c.best(c.blk)
					}
				}
			}
			if winBound <= thr {
				for _, c := range cs[ess:] {
					c.seek(win + 1)
				}
				continue
			}
		}
		clear(parts)
		// d is an essential term's current passage: the first such
		// cursor gives its length.
		norm := math.NaN()
		partial := 0.0
		for _, c := range cs[ess:] {
			if c.doc == d {
				if math.IsNaN(norm) {
					norm = ix.norm(c.dls[c.i])
				}
				p := c.w * sat(c.tfs[c.i], norm)
				parts[c.pos] = p
				partial += p
				c.next()
			}
		}
		pruned := false
		for i := ess - 1; i >= 0; i-- {
			if partial+prefix[i] <= thr {
				pruned = true
				break
			}
			c := cs[i]
			b := c.blockFor(d)
			if b >= c.nb {
				continue
			}
			rest := 0.0
			if i > 0 {
				rest = prefix[i-1]
			}
			if partial+c.w*c.best(b)+rest <= thr {
				pruned = true
				break
			}
			c.seek(d)
			if c.doc == d {
				p := c.w * sat(c.tfs[c.i], norm)
				parts[c.pos] = p
				partial += p
			}
		}
		if pruned {
			continue
		}
		t.offer(scored{d, score()})
		if c := cut(t.floor); c > thr {
			thr = c
			for ess < len(cs) && prefix[ess] <= thr {
				ess++
			}
		}
	}
}
