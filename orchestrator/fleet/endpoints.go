package fleet

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/recipes"
)

// Add adds the policy server p to the set, drained: a probe admits it once
// it is healthy and Readmit (when set) gave it the weights in use, as a
// replica that came back. A URL the set held before takes its index again
// (removed: added back; already there: nothing changes). It returns p's
// index.
func (r *Replicas) Add(p policy.Policy) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.all()
	for i, rp := range set {
		if rp.p.URL() != p.URL() {
			continue
		}
		if rp.gone.Swap(false) && !rp.probing {
			rp.probing = true
			go r.probe(i)
		}
		return i
	}
	rp := &replica{p: p}
	rp.down.Store(true)
	grown := append(slices.Clip(set), rp)
	// The book first: a request that sees the new index finds its row.
	r.book.grow(len(grown))
	r.set.Store(&grown)
	i := len(grown) - 1
	rp.probing = true
	go r.probe(i)
	return i
}

// Remove drains the replica at url and keeps it out until it is added
// again: no new request goes to it and its pins are released; requests in
// flight on it finish (one that fails is tried on another replica). It
// reports whether url was in the set.
func (r *Replicas) Remove(url string) bool {
	for i, rp := range r.all() {
		if rp.p.URL() == url {
			rp.gone.Store(true)
			rp.down.Store(true)
			r.pins.dropReplica(i)
			r.resyncRouter()
			return true
		}
	}
	return false
}

// URLs lists the replicas in the set (removed ones left out), in index
// order.
func (r *Replicas) URLs() []string {
	var out []string
	for _, rp := range r.all() {
		if !rp.gone.Load() {
			out = append(out, rp.p.URL())
		}
	}
	return out
}

// WatchEndpoints keeps the set equal to the endpoints file at path
// (recipes.ReadEndpoints) until ctx ends: every interval (0: 2 s) it
// checks whether the file was replaced (an atomic rename) or changed, and
// if so reads it again, adds the endpoints that appeared (newPolicy builds
// each one's client; Add admits it once healthy and holding the weights)
// and removes those that left (Remove). A version is read once it looks
// the same at two checks in a row, and an empty file is taken as being
// written, so that a file written in place is not read half-written. A
// file that cannot be read or parsed leaves the set as it is. While the file lists no endpoint,
// requests wait (they fail only when ctx ends). What it does is said on
// out, one line each. It polls rather than watching for events: the file
// often lives on a shared file system (NFS), where events are not
// delivered.
func (r *Replicas) WatchEndpoints(ctx context.Context, path string, interval time.Duration, newPolicy func(url string) (policy.Policy, error), out io.Writer) {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	r.dynamic.Store(true)
	// No version is taken as read: the set was built from the file at
	// load, and it may have been replaced since; the first check
	// reconciles the set with the file as it is. A version is read once
	// it looks the same at two checks in a row: a file written in place
	// is read whole, not half-written (a truncated file would drain
	// every replica).
	var last, seen os.FileInfo
	same := func(a, b os.FileInfo) bool {
		return a != nil && b != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
	}
	lastErr := ""
	say := func(format string, a ...any) { fmt.Fprintf(out, "policy.endpoints_file: "+format+"\n", a...) }
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fi, err := os.Stat(path)
		if err == nil {
			if same(fi, last) || fi.Size() == 0 {
				// Unchanged, or empty: being written (a file listing no
				// server says so: endpoints: []).
				continue
			}
			if !same(fi, seen) {
				seen = fi // read at the next check if it is still this
				continue
			}
		}
		var urls []string
		if err == nil {
			urls, err = recipes.ReadEndpoints(path)
		}
		if err != nil {
			if err.Error() != lastErr {
				say("%v; keeping the %d replicas listed before", err, len(r.URLs()))
				lastErr = err.Error()
			}
			if fi != nil {
				last = fi // read again once it changes
			}
			continue
		}
		last, lastErr = fi, ""
		r.Reconcile(urls, newPolicy, func(line string) { say("%s", line) })
		if len(urls) == 0 {
			say("%s lists no endpoint: requests wait until it lists one", path)
		}
	}
}

// Reconcile makes the set the policy servers at urls, as a discovery
// source lists them (the endpoints file, Kubernetes pods): servers that
// appeared are added (newPolicy builds each one's client; Add admits it
// once healthy and holding the weights), those that left are removed
// (Remove). From then on, with no replica listed, requests wait for one
// instead of failing. Each change is said on say, one line each.
func (r *Replicas) Reconcile(urls []string, newPolicy func(url string) (policy.Policy, error), say func(line string)) {
	r.dynamic.Store(true)
	have := r.URLs()
	for _, u := range urls {
		if slices.Contains(have, u) {
			continue
		}
		p, err := newPolicy(u)
		if err != nil {
			say(fmt.Sprintf("%s: %v", u, err))
			continue
		}
		r.Add(p)
		say(u + " added: admitted once healthy and serving the weights in use")
	}
	for _, u := range have {
		if !slices.Contains(urls, u) {
			r.Remove(u)
			say(u + " removed: drained (requests in flight finish)")
		}
	}
}
