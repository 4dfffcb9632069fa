// Package progress reports the progress of a run's long phases (rollouts,
// evaluations, index building): live bars on a terminal, and a plain log
// line every few seconds when the output is a file or a pipe, where redrawn
// bars would only litter the log.
//
// A nil *Reporter and a nil *Task are valid and report nothing, so code that
// reports progress needs no checks.
package progress

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Mode selects how progress is shown.
type Mode string

const (
	// Bars draws live progress bars (for a terminal).
	Bars Mode = "bars"
	// Lines prints a plain progress line every Interval (for logs).
	Lines Mode = "lines"
	// Off reports nothing.
	Off Mode = "off"
)

// DefaultInterval is how often Lines mode prints a task's progress.
const DefaultInterval = 10 * time.Second

// Reporter shows the progress of tasks on one output. Lines written through
// Writer appear above any live bars. It is safe for concurrent use.
type Reporter struct {
	mode     Mode
	out      io.Writer
	interval time.Duration
	now      func() time.Time

	// Bars mode: the live tasks, how many bar lines are on screen, and the
	// redraw ticker (running while any task is live).
	mu       sync.Mutex
	live     []*Task
	drawn    int
	stop     chan struct{}
	finished chan struct{}
}

// New returns a reporter writing to out in mode; interval is the period of
// Lines mode (0: DefaultInterval). Close it when done.
func New(out io.Writer, mode Mode, interval time.Duration) *Reporter {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Reporter{mode: mode, out: out, interval: interval, now: time.Now}
}

// ParseMode maps the --progress flag's value to a Mode; "auto" picks Bars
// when tty is true and Lines otherwise.
func ParseMode(s string, tty bool) (Mode, error) {
	switch s {
	case "auto", "":
		if tty {
			return Bars, nil
		}
		return Lines, nil
	case string(Bars), string(Lines), string(Off):
		return Mode(s), nil
	}
	return "", fmt.Errorf("--progress %q: want auto, bars, lines or off", s)
}

// Writer returns the writer for ordinary output: in Bars mode the bars are
// erased, the text written and the bars drawn again below it (write whole
// lines); otherwise it goes straight to the output.
func (r *Reporter) Writer() io.Writer {
	if r == nil {
		return io.Discard
	}
	if r.mode != Bars {
		return r.out
	}
	return writerFunc(func(b []byte) (int, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.erase()
		n, err := r.out.Write(b)
		r.draw()
		return n, err
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// Close erases the bars; the reporter must not be used afterwards.
func (r *Reporter) Close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	live := append([]*Task(nil), r.live...)
	r.mu.Unlock()
	for _, t := range live {
		t.Done()
	}
}

// barWidth is the width of a bar's filled part.
const barWidth = 30

// erase removes the bars drawn last (caller holds mu).
func (r *Reporter) erase() {
	if r.drawn > 0 {
		// Up to the first bar line, then clear to the end of the screen.
		fmt.Fprintf(r.out, "\x1b[%dA\r\x1b[J", r.drawn)
		r.drawn = 0
	}
}

// draw prints one line per live task (caller holds mu).
func (r *Reporter) draw() {
	var b strings.Builder
	for _, t := range r.live {
		b.WriteString(t.bar())
		b.WriteByte('\n')
	}
	io.WriteString(r.out, b.String())
	r.drawn = len(r.live)
}

// redraw refreshes the bars every 200 ms while any task is live.
func (r *Reporter) redraw(stop, finished chan struct{}) {
	defer close(finished)
	tk := time.NewTicker(200 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
			r.mu.Lock()
			r.erase()
			r.draw()
			r.mu.Unlock()
		}
	}
}

// Task is one phase whose progress is reported: total units of work, of
// which Add reports the finished ones. End it with Done.
type Task struct {
	r     *Reporter
	name  string
	unit  string
	total int64
	done  atomic.Int64
	start time.Time

	stop   chan struct{}
	ticker sync.WaitGroup
	ended  atomic.Bool
	lines  atomic.Int32 // progress lines printed (Lines mode)
}

// Start begins reporting a task named name of total units (e.g.
// "trajectories"); total <= 0 means unknown.
func (r *Reporter) Start(name string, total int, unit string) *Task {
	if r == nil || r.mode == Off {
		return nil
	}
	t := &Task{r: r, name: name, unit: unit, total: int64(total), start: r.now()}
	switch r.mode {
	case Bars:
		r.mu.Lock()
		r.erase()
		r.live = append(r.live, t)
		r.draw()
		if r.stop == nil {
			r.stop, r.finished = make(chan struct{}), make(chan struct{})
			go r.redraw(r.stop, r.finished)
		}
		r.mu.Unlock()
	case Lines:
		t.stop = make(chan struct{})
		t.ticker.Add(1)
		go t.tick()
	}
	return t
}

// Add reports n more finished units.
func (t *Task) Add(n int) {
	if t == nil {
		return
	}
	t.done.Add(int64(n))
}

// Count is the number of finished units reported so far (0 for nil).
func (t *Task) Count() int64 {
	if t == nil {
		return 0
	}
	return t.done.Load()
}

// Done ends the task: its bar disappears; in Lines mode a final line is
// printed if any progress line was (a short task prints nothing).
func (t *Task) Done() {
	if t == nil || !t.ended.CompareAndSwap(false, true) {
		return
	}
	r := t.r
	if r.mode == Bars {
		r.mu.Lock()
		r.erase()
		if i := slices.Index(r.live, t); i >= 0 {
			r.live = slices.Delete(r.live, i, i+1)
		}
		r.draw()
		var stop, finished chan struct{}
		if len(r.live) == 0 && r.stop != nil {
			stop, finished, r.stop, r.finished = r.stop, r.finished, nil, nil
		}
		r.mu.Unlock()
		if stop != nil {
			close(stop)
			<-finished
		}
		return
	}
	close(t.stop)
	t.ticker.Wait()
	if t.lines.Load() > 0 {
		fmt.Fprintf(r.out, "%s: %d %s in %s\n", t.name, t.done.Load(), t.unit, r.now().Sub(t.start).Round(100*time.Millisecond))
	}
}

// bar is the task's bar line: name, bar, counts, share, elapsed time.
func (t *Task) bar() string {
	done, total := t.done.Load(), t.total
	el := t.r.now().Sub(t.start).Round(100 * time.Millisecond)
	if total <= 0 {
		return fmt.Sprintf("%-24s %d %s  %s", t.name, done, t.unit, el)
	}
	fill := int(min(done, total) * barWidth / total)
	return fmt.Sprintf("%-24s [%s%s] %d/%d %s %3.0f%%  %s", t.name, strings.Repeat("=", fill), strings.Repeat(" ", barWidth-fill),
		done, total, t.unit, 100*float64(min(done, total))/float64(total), el)
}

func (t *Task) tick() {
	defer t.ticker.Done()
	tk := time.NewTicker(t.r.interval)
	defer tk.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tk.C:
			t.lines.Add(1)
			fmt.Fprintln(t.r.out, t.Line())
		}
	}
}

// Line is the task's progress as one plain line: done/total, share, rate
// and estimated time left.
func (t *Task) Line() string {
	if t == nil {
		return ""
	}
	done := t.done.Load()
	el := t.r.now().Sub(t.start)
	rate := 0.0
	if s := el.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	if t.total <= 0 {
		return fmt.Sprintf("%s: %d %s, %.1f/s, %s elapsed", t.name, done, t.unit, rate, el.Round(time.Second))
	}
	line := fmt.Sprintf("%s: %d/%d %s (%.0f%%), %.1f/s, %s elapsed", t.name, done, t.total, t.unit,
		100*float64(done)/float64(t.total), rate, el.Round(time.Second))
	if rate > 0 && done < t.total {
		left := time.Duration(float64(t.total-done) / rate * float64(time.Second))
		line += fmt.Sprintf(", about %s left", left.Round(time.Second))
	}
	return line
}
