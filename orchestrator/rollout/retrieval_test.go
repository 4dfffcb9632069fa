package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/retriever"
)

// countingRetriever answers "hit:<query>" and records every call's batch.
type countingRetriever struct {
	mu      sync.Mutex
	batches [][]string
	delay   time.Duration
	fail    bool
}

func (c *countingRetriever) Retrieve(ctx context.Context, queries []string, topk int) ([][]retriever.Hit, error) {
	c.mu.Lock()
	c.batches = append(c.batches, append([]string(nil), queries...))
	fail := c.fail
	c.mu.Unlock()
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
	if fail {
		return nil, errors.New("boom")
	}
	out := make([][]retriever.Hit, len(queries))
	for i, q := range queries {
		out[i] = []retriever.Hit{{ID: q, Contents: "\"T\"\nhit:" + q}}
	}
	return out, nil
}

func (c *countingRetriever) URL() string { return "fake" }

func (c *countingRetriever) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.batches)
}

func searchAll(t *testing.T, b *batcher, queries []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(queries))
	for i, q := range queries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hits, err := b.search(context.Background(), q)
			if err == nil && (len(hits) != 1 || hits[0].ID != q) {
				err = fmt.Errorf("query %q got %+v", q, hits)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestBatcherCoalescesWithinWindow(t *testing.T) {
	fr := &countingRetriever{}
	b := newBatcher(fr, 3, 50*time.Millisecond, 100, false)
	var qs []string
	for i := range 20 {
		qs = append(qs, fmt.Sprintf("q%d", i))
	}
	searchAll(t, b, qs)
	// Twenty concurrent searches within one window: one call (the window is
	// long against goroutine start-up, so this does not depend on timing
	// beyond that).
	if fr.calls() != 1 || len(fr.batches[0]) != 20 {
		t.Fatalf("batches %v", fr.batches)
	}
	if b.queries.Load() != 20 || b.calls.Load() != 1 {
		t.Fatalf("stats %d queries %d calls", b.queries.Load(), b.calls.Load())
	}
}

func TestBatcherMaxBatch(t *testing.T) {
	fr := &countingRetriever{}
	b := newBatcher(fr, 3, time.Hour, 4, false)
	var qs []string
	for i := range 12 {
		qs = append(qs, fmt.Sprintf("q%d", i))
	}
	// With an hour-long window only full batches go out: exactly three.
	searchAll(t, b, qs)
	if fr.calls() != 3 {
		t.Fatalf("%d calls, want 3 of 4", fr.calls())
	}
	for _, batch := range fr.batches {
		if len(batch) != 4 {
			t.Fatalf("batches %v", fr.batches)
		}
	}
}

func TestBatcherCachePerStep(t *testing.T) {
	fr := &countingRetriever{}
	b := newBatcher(fr, 3, 0, 64, true)
	b.reset(context.Background())
	searchAll(t, b, []string{"a", "a", "a", "b"})
	searchAll(t, b, []string{"a", "b"})
	sent := 0
	for _, batch := range fr.batches {
		sent += len(batch)
	}
	if sent != 2 {
		t.Fatalf("sent %d queries (%v), want a and b once each", sent, fr.batches)
	}
	if b.cacheHits.Load() != 4 {
		t.Errorf("%d cache hits, want 4", b.cacheHits.Load())
	}
	// A new step forgets.
	b.reset(context.Background())
	searchAll(t, b, []string{"a"})
	if sent2 := len(fr.batches); sent2 == 0 || fr.batches[sent2-1][0] != "a" {
		t.Fatalf("after reset: %v", fr.batches)
	}
	if s := b.savedShare(); s <= 0 || s >= 1 {
		t.Errorf("saved share %v", s)
	}
}

func TestBatcherNoWindowBatchesWhileInFlight(t *testing.T) {
	fr := &countingRetriever{delay: 30 * time.Millisecond}
	b := newBatcher(fr, 3, 0, 64, false)
	var qs []string
	for i := range 30 {
		qs = append(qs, fmt.Sprintf("q%d", i))
	}
	searchAll(t, b, qs)
	// Whatever arrives while a call is in flight waits for it and goes
	// together: fewer calls than queries, every query answered.
	if fr.calls() >= 30 {
		t.Fatalf("%d calls for 30 queries", fr.calls())
	}
}

func TestBatcherErrorsAreNotCached(t *testing.T) {
	fr := &countingRetriever{fail: true}
	b := newBatcher(fr, 3, 0, 64, true)
	if _, err := b.search(context.Background(), "a"); err == nil {
		t.Fatal("no error")
	}
	fr.mu.Lock()
	fr.fail = false
	fr.mu.Unlock()
	if hits, err := b.search(context.Background(), "a"); err != nil || len(hits) != 1 {
		t.Fatalf("retry after a failure: %v %v", hits, err)
	}
}

func TestBatcherCallerCancel(t *testing.T) {
	fr := &countingRetriever{delay: 200 * time.Millisecond}
	b := newBatcher(fr, 3, 0, 64, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.search(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	time.Sleep(250 * time.Millisecond) // let the call finish before the test ends
}
