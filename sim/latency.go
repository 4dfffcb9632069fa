package sim

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/hindsearch/hindsearch/recipes"
)

// Latency is the simulated servers' timing model. The zero value makes
// every server answer as fast as it computes (no simulated latency), which
// is the default.
//
// The policy timing emulates a continuous-batching GPU server (vLLM): each
// replica runs one engine that admits queued sequences up to Capacity;
// each step prefills admitted prompts (at most PrefillChunk prompt tokens a
// step, chunked-prefill style) and advances every sequence whose prompt is
// done by one token. A step takes DecodeStep + DecodePerSeq*decoding +
// PrefillPerToken*max(0, prefilled + decoding - PrefillFree): a decode
// step is memory-bound, so its first PrefillFree tokens of compute are
// free, and only prompt work beyond that slack slows the step. The engine runs when any of
// Capacity, DecodeStep, DecodePerSeq, PrefillPerToken and ThinkTokens is
// set; otherwise requests bypass it entirely.
type Latency struct {
	// Capacity is the most sequences one policy replica runs at once
	// (later requests wait in a FIFO queue); 0 is unlimited.
	Capacity int
	// DecodeStep is one decode step's time with one running sequence.
	DecodeStep time.Duration
	// DecodePerSeq is added to a step per running sequence.
	DecodePerSeq time.Duration
	// PrefillPerToken is charged per token a step processes beyond
	// PrefillFree (prompt tokens prefilled plus one per decoding sequence).
	PrefillPerToken time.Duration
	// PrefixCaching keeps the KV blocks a replica processed, as vLLM's
	// automatic prefix caching: a prompt is prefilled only past its longest
	// cached prefix of whole 16-token blocks.
	PrefixCaching bool
	// PrefillFree is the compute slack of a memory-bound decode step, in
	// tokens.
	PrefillFree int
	// PrefillChunk caps the prompt tokens prefilled per step (0: whole
	// prompts in their admission step).
	PrefillChunk int
	// ThinkTokens is the mean number of extra, hidden decode steps of a
	// completion request (not of a prompt-logprob scoring request): a
	// lognormal draw with that mean and log-space standard deviation
	// ThinkSigma, from the request's seed (so the same seed gives the same
	// count), rounded to an integer. It emulates the long tail of real
	// generation lengths; 0 adds none, ThinkSigma 0 adds exactly
	// ThinkTokens (rounded).
	ThinkTokens float64
	// ThinkSigma is the lognormal sigma of ThinkTokens.
	ThinkSigma float64
	// Judge is the simulated judge's time per chat request.
	Judge time.Duration
	// TrainerPerDatum is the simulated trainer's forward_backward time per
	// datum.
	TrainerPerDatum time.Duration
	// TrainerStep is the simulated trainer's time per optim_step and per
	// save_weights_for_sampler.
	TrainerStep time.Duration
	// RetrieverBatch is the retriever's time per /retrieve call and
	// RetrieverQuery its time per query of a call (see DelayedRetriever).
	RetrieverBatch time.Duration
	RetrieverQuery time.Duration
}

// engineOn reports whether the policy timing is set, so that requests go
// through the continuous-batching engine.
func (l Latency) engineOn() bool {
	return l.Capacity > 0 || l.DecodeStep > 0 || l.DecodePerSeq > 0 || l.PrefillPerToken > 0 || l.ThinkTokens > 0
}

// LatencyFromRecipe converts the recipe's sim.* timing keys (milliseconds,
// and microseconds for sim.prefill_us_per_token) to a Latency.
func LatencyFromRecipe(s recipes.Sim) Latency {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	return Latency{
		Capacity:        s.Capacity,
		DecodeStep:      ms(s.DecodeMS),
		DecodePerSeq:    ms(s.DecodePerSeqMS),
		PrefillPerToken: time.Duration(s.PrefillUSPerToken * float64(time.Microsecond)),
		PrefillFree:     s.PrefillFreeTokens,
		PrefixCaching:   s.PrefixCaching,
		PrefillChunk:    s.PrefillChunkTokens,
		ThinkTokens:     s.ThinkTokens,
		ThinkSigma:      s.ThinkSigma,
		Judge:           ms(s.JudgeMS),
		TrainerPerDatum: ms(s.TrainerDatumMS),
		TrainerStep:     ms(s.TrainerStepMS),
		RetrieverBatch:  ms(s.RetrieverBatchMS),
		RetrieverQuery:  ms(s.RetrieverQueryMS),
	}
}

// maxThink bounds one request's hidden think tokens.
const maxThink = 1 << 20

// thinkTokens draws the hidden decode steps of one request: lognormal with
// the given mean and sigma, from seed when there is one.
func thinkTokens(mean, sigma float64, seed *int64) int {
	if !(mean > 0) {
		return 0
	}
	if !(sigma > 0) {
		return int(math.Round(math.Min(mean, maxThink)))
	}
	var rng *rand.Rand
	if seed != nil {
		rng = rand.New(rand.NewPCG(uint64(*seed), 0x7468696e6b746f6b)) // "thinktok"
	} else {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	mu := math.Log(mean) - sigma*sigma/2
	x := math.Exp(mu + sigma*rng.NormFloat64())
	return int(math.Round(math.Min(x, maxThink)))
}

// PolicyStats are a policy replica's scheduling counters.
type PolicyStats struct {
	// Running is the number of sequences running (admitted to the batch);
	// without the engine, the completion requests in flight.
	Running int
	// Waiting is the number of sequences queued for admission (0 without
	// the engine).
	Waiting int
	// Requests counts completion requests received.
	Requests int64
	// DecodeSteps counts the engine's decode steps (0 without the engine).
	DecodeSteps int64
	// BusySeconds is the cumulative wall time during which at least one
	// sequence was running or being prefilled: the simulated GPU-busy time
	// (0 without the engine).
	BusySeconds float64
	// Tokens counts decoded tokens: with the engine one per running
	// sequence per step (hidden think tokens included), without it the
	// completion tokens returned.
	Tokens int64
	// PromptTokens counts the prompt tokens of requests through the engine,
	// and CachedTokens those of them served from the prefix cache (0
	// without sim.prefix_caching): their ratio is the prefix-cache hit
	// rate.
	PromptTokens, CachedTokens int64
}

// errEngineClosed answers requests that reach or wait in a closed engine.
var errEngineClosed = errors.New("simulated engine shut down")

// sequence is one completion request inside the engine.
type sequence struct {
	prompt  int // prompt tokens, prefilled after admission
	left    int // prompt tokens still to prefill
	need    int // decode steps to run
	decoded int
	step    bool          // decodes a token in the step in progress
	ready   chan struct{} // closed when the sequence completes

	enqueued, admitted, firstStep, finished time.Time
}

// engine is one policy replica's continuous-batching scheduler: a FIFO
// queue, a running set of at most Capacity sequences and one goroutine that
// runs decode steps while there is work.
type engine struct {
	lat    Latency
	wake   chan struct{} // buffered: a submission for an idle loop
	done   chan struct{} // closed by close
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
	// hook, when set (tests, under mu), runs before each step's sleep,
	// without the lock held.
	hook      func()
	queue     []*sequence
	running   []*sequence
	steps     int64
	tokens    int64
	busy      time.Duration
	stepStart time.Time // when the step in progress started (zero: none)
}

func newEngine(l Latency) *engine {
	e := &engine{lat: l, wake: make(chan struct{}, 1), done: make(chan struct{})}
	e.wg.Add(1)
	go e.loop()
	return e
}

// submit queues s; it fails once the engine is closed.
func (e *engine) submit(s *sequence) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return errEngineClosed
	}
	s.enqueued = time.Now()
	e.queue = append(e.queue, s)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return nil
}

// cancel removes s from the queue or the running set (its client is gone).
func (e *engine) cancel(s *sequence) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queue = remove(e.queue, s)
	e.running = remove(e.running, s)
}

func remove(list []*sequence, s *sequence) []*sequence {
	for i, x := range list {
		if x == s {
			copy(list[i:], list[i+1:])
			list[len(list)-1] = nil
			return list[:len(list)-1]
		}
	}
	return list
}

// close stops the loop and waits for it; waiting requests are answered
// with errEngineClosed by their handlers.
func (e *engine) close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.done)
	}
	e.mu.Unlock()
	e.wg.Wait()
}

func (e *engine) stats() (running, waiting int, steps, tokens int64, busy time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	busy = e.busy
	if !e.stepStart.IsZero() {
		busy += time.Since(e.stepStart)
	}
	return len(e.running), len(e.queue), e.steps, e.tokens, busy
}

func (e *engine) loop() {
	defer e.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		e.mu.Lock()
		now := time.Now()
		prefill := 0
		for len(e.queue) > 0 && (e.lat.Capacity <= 0 || len(e.running) < e.lat.Capacity) {
			s := e.queue[0]
			e.queue[0] = nil
			e.queue = e.queue[1:]
			s.admitted = now
			s.left = s.prompt
			e.running = append(e.running, s)
		}
		// Prefill in admission order within the chunk budget; sequences
		// whose prompt is done (or finishes now) decode one token.
		decoding := 0
		budget := e.lat.PrefillChunk
		for _, s := range e.running {
			if s.left > 0 {
				n := s.left
				if budget > 0 {
					n = min(n, budget-prefill)
				}
				if n <= 0 {
					s.step = false
					continue
				}
				s.left -= n
				prefill += n
			}
			s.step = s.left == 0
			if s.step {
				decoding++
			}
		}
		if len(e.queue) == 0 {
			e.queue = nil // let the backing array go
		}
		if len(e.running) == 0 {
			e.mu.Unlock()
			select {
			case <-e.wake:
				continue
			case <-e.done:
				return
			}
		}
		d := e.lat.DecodeStep + e.lat.DecodePerSeq*time.Duration(decoding) +
			e.lat.PrefillPerToken*time.Duration(max(0, prefill+decoding-e.lat.PrefillFree))
		hook := e.hook
		e.mu.Unlock()
		if hook != nil {
			hook()
		}
		e.mu.Lock()
		start := time.Now()
		e.stepStart = start
		e.mu.Unlock()
		if d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-e.done:
				return
			}
		} else {
			select {
			case <-e.done:
				return
			default:
			}
			runtime.Gosched()
		}
		e.mu.Lock()
		end := time.Now()
		e.busy += end.Sub(start)
		e.stepStart = time.Time{}
		e.steps++
		keep := e.running[:0]
		for _, s := range e.running {
			if !s.step {
				keep = append(keep, s)
				continue
			}
			s.decoded++
			e.tokens++
			if s.firstStep.IsZero() {
				s.firstStep = end
			}
			if s.decoded >= s.need {
				s.finished = end
				close(s.ready)
				continue
			}
			keep = append(keep, s)
		}
		clear(e.running[len(keep):])
		e.running = keep
		e.mu.Unlock()
	}
}
