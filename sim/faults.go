package sim

import (
	"fmt"

	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/sim/internal/httpx"
)

// FaultKinds are the faults a simulated server can inject.
var FaultKinds = []string{"500", "502", "503", "429", "reset", "hang", "slow", "malformed", "lost"}

// Faults configures fault injection on one simulated server: each request
// is faulted with probability Rate, with a kind drawn uniformly from Kinds.
// Every kind but lost strikes before the server handles the request (so
// the request changes nothing on the server): an error status (429 with
// Retry-After), a connection reset, a hang of Hang (past the client's
// deadline), a delay of Slow before normal handling, or a 200 answer with a
// body cut short. lost lets the server handle the request in full (the work
// is done: a model made, a checkpoint saved) and then closes the connection
// without writing the answer, as a network or proxy that drops an answer
// does: the fault that makes a call that is not idempotent come back as an
// error after the server acted.
type Faults struct {
	Rate  float64
	Kinds []string
	Hang  time.Duration
	Slow  time.Duration
	Seed  uint64
	// Routes, when not empty, limits the faults to requests whose URL
	// path is one of them (e.g. "/api/v1/create_model").
	Routes []string
	// PerRoute, when positive, is the most faults injected on each path.
	PerRoute int
}

// Validate checks the kinds and the rate.
func (f Faults) Validate() error {
	if !(f.Rate >= 0 && f.Rate <= 1) {
		return fmt.Errorf("fault rate %v: want [0, 1]", f.Rate)
	}
	for _, k := range f.Kinds {
		if !contains(FaultKinds, k) {
			return fmt.Errorf("fault kind %q: want one of %s", k, strings.Join(FaultKinds, ", "))
		}
	}
	if f.Rate > 0 && len(f.Kinds) == 0 {
		return fmt.Errorf("fault rate %v with no kinds", f.Rate)
	}
	if f.PerRoute < 0 {
		return fmt.Errorf("faults per route %d: want at least 0", f.PerRoute)
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// Faulty wraps a simulated server's handler with fault injection and
// counts the faults it injected.
type Faulty struct {
	h        http.Handler
	f        Faults
	mu       sync.Mutex
	rng      *rand.Rand
	injected atomic.Int64
	perRoute map[string]int // faults injected per path (guarded by mu)
	stop     chan struct{}
	once     sync.Once
}

// NewFaulty wraps h; with a zero Rate it passes every request through.
func NewFaulty(h http.Handler, f Faults) *Faulty {
	return &Faulty{h: h, f: f, rng: rand.New(rand.NewPCG(f.Seed, 0x6661756c74)), perRoute: map[string]int{}, stop: make(chan struct{})}
}

// Injected is the number of faults injected so far.
func (x *Faulty) Injected() int64 { return x.injected.Load() }

// Close ends any hang in progress.
func (x *Faulty) Close() { x.once.Do(func() { close(x.stop) }) }

// draw picks the fault of a request to path ("" for none).
func (x *Faulty) draw(path string) string {
	if x.f.Rate <= 0 || len(x.f.Kinds) == 0 {
		return ""
	}
	if len(x.f.Routes) > 0 && !contains(x.f.Routes, path) {
		return ""
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.f.PerRoute > 0 && x.perRoute[path] >= x.f.PerRoute {
		return ""
	}
	if x.rng.Float64() >= x.f.Rate {
		return ""
	}
	x.perRoute[path]++
	return x.f.Kinds[x.rng.IntN(len(x.f.Kinds))]
}

// ServeHTTP injects a fault or handles the request.
func (x *Faulty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := x.draw(r.URL.Path)
	if kind == "" {
		x.h.ServeHTTP(w, r)
		return
	}
	x.injected.Add(1)
	w.Header().Set(httpx.SimulatorHeader, "true")
	w.Header().Set("X-Sim-Fault", kind)
	switch kind {
	case "500", "502", "503":
		st, _ := strconv.Atoi(kind)
		http.Error(w, "simulated fault (hindsearch simulator)", st)
	case "429":
		w.Header().Set("Retry-After", "0.05")
		http.Error(w, "simulated rate limit (hindsearch simulator)", http.StatusTooManyRequests)
	case "reset":
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		http.Error(w, "simulated fault", http.StatusBadGateway)
	case "hang":
		t := time.NewTimer(x.f.Hang)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
		case <-x.stop:
		}
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
			}
		}
	case "slow":
		t := time.NewTimer(x.f.Slow)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-x.stop:
		}
		x.h.ServeHTTP(w, r)
	case "malformed":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices": [{"text": "cut sho`))
	case "lost":
		x.h.ServeHTTP(&discardWriter{header: http.Header{}}, r)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		http.Error(w, "simulated fault: answer lost", http.StatusBadGateway)
	}
}

// discardWriter takes a handler's answer and drops it (the lost fault).
type discardWriter struct{ header http.Header }

func (d *discardWriter) Header() http.Header         { return d.header }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// RoleFaults are the faults of each simulated role.
type RoleFaults struct {
	Policy, Judge, Retriever, Trainer Faults
}

// FaultsFromRecipe converts the recipe's sim.faults keys; seed seeds the
// draws (each role its own stream).
func FaultsFromRecipe(s recipes.SimFaults, seed int64) RoleFaults {
	conv := func(f recipes.FaultSpec, stream uint64) Faults {
		return Faults{Rate: f.Rate, Kinds: append([]string(nil), f.Kinds...),
			Hang: time.Duration(f.HangMS * float64(time.Millisecond)), Slow: time.Duration(f.SlowMS * float64(time.Millisecond)),
			Seed: uint64(seed)*31 + stream}
	}
	return RoleFaults{Policy: conv(s.Policy, 1), Judge: conv(s.Judge, 2), Retriever: conv(s.Retriever, 3), Trainer: conv(s.Trainer, 4)}
}
