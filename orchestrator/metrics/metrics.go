// Package metrics holds a run's Prometheus metrics: the servers' calls and
// retries (through the transport's hooks), the trajectories in flight, and
// each recorded step and evaluation, on a registry of their own.
package metrics

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/results"
)

// Metrics are the orchestrator's Prometheus metrics, on a registry of their
// own (never the global one), so that every run and every test has fresh
// counters. A nil *Metrics records nothing.
//
// Exposed (all prefixed hindsearch_): requests_total{role,path,code},
// retries_total{role,code}, request_duration_seconds{role,path} (the whole
// call, retries included), trajectories_in_flight, trajectories_total
// {finish}, steps_total, step, reward_mean, failed_fraction, critiques_total,
// critique_failures_total, opd_tokens_total, opd_mean,
// phase_seconds{phase} (the last step's), eval_em{dataset} (the last
// evaluation, a fraction), health{metric} and health_truncated{cause} (the
// last step's results.Health), health_after_cut{kind} (what the policy
// wrote after a cut <information> block, by results.AfterCutKind; 0 at a
// step with none), health_alarm{metric} (1 while the collapse
// alarm fires on the metric), filtered_total and penalised_turns_total
// (train.filter, rollout.turn_penalty), tracker_failures_total{tracker}
// (tracking.*), plus the Go and process collectors.
type Metrics struct {
	// Registry holds every metric below.
	Registry *prometheus.Registry

	requests     *prometheus.CounterVec
	retries      *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	inflight     prometheus.Gauge
	trajectories *prometheus.CounterVec
	steps        prometheus.Counter
	step         prometheus.Gauge
	reward       prometheus.Gauge
	failed       prometheus.Gauge
	critiques    prometheus.Counter
	critFailures prometheus.Counter
	opdTokens    prometheus.Counter
	opdMean      prometheus.Gauge
	phase        *prometheus.GaugeVec
	evalEM       *prometheus.GaugeVec
	health       *prometheus.GaugeVec
	truncated    *prometheus.GaugeVec
	afterCut     *prometheus.GaugeVec
	alarm        *prometheus.GaugeVec
	filtered     prometheus.Counter
	penalised    prometheus.Counter
	trackerFails *prometheus.CounterVec
}

// New returns metrics registered on a new registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &Metrics{Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hindsearch_requests_total",
			Help: "HTTP calls to the servers by role, path and final status code (0: no response)."}, []string{"role", "path", "code"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hindsearch_retries_total",
			Help: "Retried HTTP attempts by role and the status of the failed attempt (0: connection error or timeout)."}, []string{"role", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "hindsearch_request_duration_seconds",
			Help:    "Duration of HTTP calls, retries included, by role and path.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, []string{"role", "path"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hindsearch_trajectories_in_flight",
			Help: "Trajectories being rolled out now (training and evaluation)."}),
		trajectories: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hindsearch_trajectories_total",
			Help: "Finished trajectories by how they ended (answer, max_turns, context)."}, []string{"finish"}),
		steps: prometheus.NewCounter(prometheus.CounterOpts{Name: "hindsearch_steps_total", Help: "Training steps recorded."}),
		step:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "hindsearch_step", Help: "The last recorded training step."}),
		reward: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hindsearch_reward_mean",
			Help: "Mean exact-match reward of the last step's trajectories."}),
		failed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hindsearch_failed_fraction",
			Help: "Share of the last step's trajectories with reward 0."}),
		critiques: prometheus.NewCounter(prometheus.CounterOpts{Name: "hindsearch_critiques_total",
			Help: "Judge critiques used as hints."}),
		critFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "hindsearch_critique_failures_total",
			Help: "Failed trajectories left without a usable critique."}),
		opdTokens: prometheus.NewCounter(prometheus.CounterOpts{Name: "hindsearch_opd_tokens_total",
			Help: "Tokens that received a non-zero on-policy-distillation term."}),
		opdMean: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hindsearch_opd_mean",
			Help: "Mean OPD term over the last step's OPD tokens."}),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hindsearch_phase_seconds",
			Help: "Busy time of each phase in the last step (phases overlap under the async schedule)."}, []string{"phase"}),
		evalEM: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hindsearch_eval_em",
			Help: "Exact-match rate (0-1) of the last greedy search evaluation by dataset."}, []string{"dataset"}),
		health: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hindsearch_health",
			Help: "The last step's search-agent health by metric (steps.jsonl health; rates are fractions)."}, []string{"metric"}),
		truncated: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hindsearch_health_truncated",
			Help: "Share of the last step's trajectories truncated, by cause."}, []string{"cause"}),
		afterCut: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hindsearch_health_after_cut",
			Help: "Share of the last step's turns after an <information> block cut at rollout.max_obs_tokens, by what the policy wrote first (closed, wrote_on, stopped, other)."}, []string{"kind"}),
		alarm: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hindsearch_health_alarm",
			Help: "1 while the collapse alarm fires on a watched health metric (health.drop over health.window), else 0."}, []string{"metric"}),
		filtered: prometheus.NewCounter(prometheus.CounterOpts{Name: "hindsearch_filtered_total",
			Help: "Trajectories train.filter kept out of the loss."}),
		penalised: prometheus.NewCounter(prometheus.CounterOpts{Name: "hindsearch_penalised_turns_total",
			Help: "Turns rollout.turn_penalty was put on."}),
		trackerFails: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hindsearch_tracker_failures_total",
			Help: "Failed calls of an experiment tracker (tracking.*), each retried in the background."}, []string{"tracker"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.retries, m.latency, m.inflight, m.trajectories, m.steps, m.step,
		m.reward, m.failed, m.critiques, m.critFailures, m.opdTokens, m.opdMean, m.phase, m.evalEM,
		m.health, m.truncated, m.afterCut, m.alarm, m.filtered, m.penalised, m.trackerFails,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// Instrument makes the transport options o report their calls and
// retries to m (chained before any hooks o already has); a nil m changes
// nothing.
func (m *Metrics) Instrument(o *transport.Options) {
	if m == nil {
		return
	}
	prevRetry, prevDone := o.OnRetry, o.OnDone
	o.OnRetry = func(role string, attempt, status int) {
		m.retries.WithLabelValues(role, strconv.Itoa(status)).Inc()
		if prevRetry != nil {
			prevRetry(role, attempt, status)
		}
	}
	o.OnDone = func(ob transport.Observation) {
		m.requests.WithLabelValues(ob.Role, ob.Path, strconv.Itoa(ob.Status)).Inc()
		m.latency.WithLabelValues(ob.Role, ob.Path).Observe(ob.Duration.Seconds())
		if prevDone != nil {
			prevDone(ob)
		}
	}
}

// TrajectoryStarted counts a trajectory in flight.
func (m *Metrics) TrajectoryStarted() {
	if m != nil {
		m.inflight.Inc()
	}
}

// TrajectoryDone counts a trajectory no longer in flight, by how it
// finished ("" for one abandoned when its step failed).
func (m *Metrics) TrajectoryDone(finish string) {
	if m != nil {
		m.inflight.Dec()
		if finish == "" {
			finish = "error" // abandoned: its step failed
		}
		m.trajectories.WithLabelValues(finish).Inc()
	}
}

// RecordStep publishes a recorded step.
func (m *Metrics) RecordStep(rec *results.StepRecord) {
	if m == nil {
		return
	}
	m.steps.Inc()
	m.step.Set(float64(rec.Step))
	m.reward.Set(rec.RewardMean)
	if rec.Trajectories > 0 {
		m.failed.Set(float64(rec.Failed) / float64(rec.Trajectories))
	}
	m.critiques.Add(float64(rec.Critiques))
	m.critFailures.Add(float64(rec.CritiqueFailures))
	m.opdTokens.Add(float64(rec.OPDTokens))
	m.opdMean.Set(rec.OPDMean)
	for p, s := range rec.PhaseSeconds {
		m.phase.WithLabelValues(p).Set(s)
	}
	if h := rec.Health; h != nil {
		firing := map[string]bool{}
		for _, a := range h.Alarms {
			firing[a.Metric] = true
		}
		for _, name := range results.HealthMetrics {
			v, ok := h.Value(name)
			if !ok {
				continue // a record from before the metric existed
			}
			m.health.WithLabelValues(name).Set(v)
			a := 0.0
			if firing[name] {
				a = 1
			}
			m.alarm.WithLabelValues(name).Set(a)
		}
		for c, v := range h.Truncated {
			m.truncated.WithLabelValues(c).Set(v)
		}
		var shares [4]float64
		if h.AfterCut != nil {
			shares = h.AfterCut.Shares()
		}
		for i, k := range results.AfterCutKinds {
			m.afterCut.WithLabelValues(k).Set(shares[i])
		}
		m.filtered.Add(float64(h.Filtered))
		m.penalised.Add(float64(h.PenalisedTurns))
	}
}

// Requests is the number of calls made to role's path so far, whatever
// their status (0 for a nil m).
func (m *Metrics) Requests(role, path string) float64 {
	if m == nil {
		return 0
	}
	fams, err := m.Registry.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, f := range fams {
		if f.GetName() != "hindsearch_requests_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			var r, p string
			for _, l := range mt.GetLabel() {
				switch l.GetName() {
				case "role":
					r = l.GetValue()
				case "path":
					p = l.GetValue()
				}
			}
			if r == role && p == path {
				total += mt.GetCounter().GetValue()
			}
		}
	}
	return total
}

// TrackerFailed counts a failed call of the named tracker.
func (m *Metrics) TrackerFailed(tracker string) {
	if m != nil {
		m.trackerFails.WithLabelValues(tracker).Inc()
	}
}

// RecordEval publishes an evaluation's EM per dataset.
func (m *Metrics) RecordEval(recs []results.EvalRecord) {
	if m == nil {
		return
	}
	for _, r := range recs {
		m.evalEM.WithLabelValues(r.Dataset).Set(r.EM)
	}
}
