package rollout

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hindsearch/hindsearch/clients/retriever"
)

// searcher answers one query at a time for a trajectory.
type searcher interface {
	search(ctx context.Context, query string) ([]retriever.Hit, error)
}

// batcher coalesces concurrent searches into batched /retrieve calls and,
// when caching is on, answers a query already seen in the same step from
// memory (an identical query in flight is joined, not sent again).
// Retrieval results do not depend on how queries are batched, so neither
// do the batches sent to the trainer.
type batcher struct {
	r        retriever.Retriever
	topk     int
	window   time.Duration
	maxBatch int
	cacheOn  bool

	mu       sync.Mutex
	ctx      context.Context
	pending  []*query
	timer    *time.Timer
	inflight int
	cache    map[string]*query

	queries   atomic.Int64 // searches asked for
	calls     atomic.Int64 // /retrieve calls made
	sentQ     atomic.Int64 // queries sent in those calls
	cacheHits atomic.Int64
}

// query is one query's pending or finished answer.
type query struct {
	text string
	done chan struct{}
	hits []retriever.Hit
	err  error
}

func newBatcher(r retriever.Retriever, topk int, window time.Duration, maxBatch int, cache bool) *batcher {
	return &batcher{r: r, topk: topk, window: window, maxBatch: max(maxBatch, 1), cacheOn: cache,
		ctx: context.Background(), cache: map[string]*query{}}
}

// reset starts a new step: calls are made under ctx and the cache is
// emptied.
func (b *batcher) reset(ctx context.Context) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ctx = ctx
	b.cache = map[string]*query{}
}

// search returns the hits of one query, batched with other searches.
func (b *batcher) search(ctx context.Context, text string) ([]retriever.Hit, error) {
	b.queries.Add(1)
	b.mu.Lock()
	q, ok := b.cache[text]
	if ok {
		b.cacheHits.Add(1)
	} else {
		q = &query{text: text, done: make(chan struct{})}
		if b.cacheOn {
			b.cache[text] = q
		}
		b.pending = append(b.pending, q)
		b.schedule()
	}
	b.mu.Unlock()
	select {
	case <-q.done:
		return q.hits, q.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// schedule decides when the pending queries go out (mu held): at once when
// a batch is full; after the window when one is set; else at once unless a
// call is in flight, whose completion sends what gathered meanwhile.
func (b *batcher) schedule() {
	switch {
	case len(b.pending) >= b.maxBatch:
		b.flush()
	case b.window > 0:
		if b.timer == nil {
			b.timer = time.AfterFunc(b.window, func() {
				b.mu.Lock()
				b.timer = nil
				b.flush()
				b.mu.Unlock()
			})
		}
	case b.inflight == 0:
		b.flush()
	}
}

// flush sends the pending queries (mu held), maxBatch per call.
func (b *batcher) flush() {
	for len(b.pending) > 0 {
		n := min(len(b.pending), b.maxBatch)
		batch := b.pending[:n:n]
		b.pending = b.pending[n:]
		b.inflight++
		ctx := b.ctx
		go b.call(ctx, batch)
	}
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
}

func (b *batcher) call(ctx context.Context, batch []*query) {
	texts := make([]string, len(batch))
	for i, q := range batch {
		texts[i] = q.text
	}
	b.calls.Add(1)
	b.sentQ.Add(int64(len(texts)))
	hits, err := b.r.Retrieve(ctx, texts, b.topk)
	if err == nil && len(hits) != len(texts) {
		err = fmt.Errorf("retrieve: %d results for %d queries", len(hits), len(texts))
	}
	b.mu.Lock()
	for i, q := range batch {
		if err != nil {
			q.err = err
			// A failure is not cached: a later search asks again.
			if b.cache[q.text] == q {
				delete(b.cache, q.text)
			}
		} else {
			q.hits = hits[i]
		}
		close(q.done)
	}
	b.inflight--
	if b.window == 0 && len(b.pending) > 0 && b.inflight == 0 {
		b.flush()
	}
	b.mu.Unlock()
}

// savedShare is the share of searches answered without an HTTP call of
// their own: 1 - calls/searches.
func (b *batcher) savedShare() float64 {
	q := b.queries.Load()
	if q == 0 {
		return 0
	}
	return 1 - float64(b.calls.Load())/float64(q)
}
