package metrics

import (
	"sync"
	"time"
)

// Phases measures, for each phase, the wall time during which at least
// one piece of that phase's work was in flight. Phases overlap (judging runs
// while other groups still roll out), so the figures need not add up to the
// step's wall time.
type Phases struct {
	mu       sync.Mutex
	now      func() time.Time
	inflight map[string]int
	since    map[string]time.Time
	total    map[string]time.Duration
}

// NewPhases returns a clock with no phase seen. A nil *Phases measures
// nothing (Start returns a no-op).
func NewPhases() *Phases {
	return &Phases{now: time.Now, inflight: map[string]int{}, since: map[string]time.Time{}, total: map[string]time.Duration{}}
}

// Start marks one piece of work of phase as begun; the returned func ends it.
func (c *Phases) Start(phase string) func() {
	if c == nil {
		return func() {}
	}
	c.mu.Lock()
	if c.inflight[phase] == 0 {
		c.since[phase] = c.now()
	}
	c.inflight[phase]++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.inflight[phase]--
			if c.inflight[phase] == 0 {
				c.total[phase] += c.now().Sub(c.since[phase])
			}
			c.mu.Unlock()
		})
	}
}

// Seconds returns the busy seconds of every phase seen so far.
func (c *Phases) Seconds() map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]float64{}
	for k, v := range c.total {
		out[k] = v.Seconds()
	}
	return out
}
