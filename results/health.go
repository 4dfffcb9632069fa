package results

import (
	"fmt"
	"strings"
)

// Health is a step's search-agent health: what SearchAgent-Zero and
// ASearcher watch on every step, from all of the step's trajectories
// (filtered ones included). Per-trajectory figures are means over the
// step's trajectories; rates over turns or searches are the step's totals'
// ratios (a trajectory with more turns weighs more).
type Health struct {
	// SearchesPerTrajectory is the mean number of search turns.
	SearchesPerTrajectory float64 `json:"searches_per_trajectory"`
	// AnswerRate is the share of trajectories that end in an <answer>.
	AnswerRate float64 `json:"answer_rate"`
	// InvalidActionRate is the share of turns with neither a search nor an
	// answer (the turns Search-R1's loop answers with its invalid-action
	// text).
	InvalidActionRate float64 `json:"invalid_action_rate"`
	// RepeatedQueryRate is the share of searches that repeat an earlier
	// search of the same trajectory (same words, case and spacing aside).
	RepeatedQueryRate float64 `json:"repeated_query_rate"`
	// RetrievalErrorRate is the share of searches the retriever failed
	// after retries (retriever.on_error observe).
	RetrievalErrorRate float64 `json:"retrieval_error_rate"`
	// GoldRetrievedRate is the share of trajectories that were shown a
	// gold answer in their retrieved passages: some search turn whose
	// <information> block's text, as far as the policy was shown it (the
	// tokens before a cut at rollout.max_obs_tokens), holds a gold answer
	// as whole words after EM's normalisation (format.ContainsAnswer; the
	// turn's gold_retrieved). A trajectory with no search, or only failed
	// ones, was shown none. Nil in records written before it existed.
	GoldRetrievedRate *float64 `json:"gold_retrieved_rate,omitempty"`
	// TruncatedRate is the share of trajectories with any of Truncated's
	// causes.
	TruncatedRate float64 `json:"truncated_rate"`
	// Truncated is the share of trajectories with each truncation cause:
	// turn_tokens (a turn cut at rollout.max_turn_tokens), context (a turn
	// cut at, or the trajectory ended by, rollout.max_context_tokens),
	// turn_limit (rollout.max_turns reached without an answer),
	// observation (an <information> block cut at rollout.max_obs_tokens).
	Truncated map[string]float64 `json:"truncated"`
	// ResponseTokens is the mean number of tokens the policy wrote (its
	// sampled tokens, environment text excluded).
	ResponseTokens float64 `json:"response_tokens"`
	// ThinkTokens is the mean number of those inside <think>...</think>.
	ThinkTokens float64 `json:"think_tokens"`
	// SampledEntropy is the mean negative logprob of the sampled tokens
	// (over all the step's policy tokens), an estimate of the policy's
	// entropy.
	SampledEntropy float64 `json:"sampled_entropy"`
	// Filtered is the number of trajectories train.filter kept out of the
	// loss; PenalisedTurns the number of turns rollout.turn_penalty was
	// put on.
	Filtered       int `json:"filtered,omitempty"`
	PenalisedTurns int `json:"penalised_turns,omitempty"`
	// Alarms are the collapse alarms firing at the step (health.drop).
	Alarms []HealthAlarm `json:"alarms,omitempty"`
	// AfterCut is what the policy wrote first in the turns that follow an
	// <information> block cut at rollout.max_obs_tokens; nil when no such
	// turn was taken at the step.
	AfterCut *AfterCut `json:"after_cut,omitempty"`
}

// AfterCut is what the policy did in the turns that follow an
// <information> block cut at rollout.max_obs_tokens, a cut that drops the
// closing tag and appends nothing (Search-R1's), as shares of those turns
// (AfterCutKind): Closed, it wrote </information> before anything else;
// WroteOn, it wrote something and then </information> (it went on with the
// passage); Stopped, it wrote nothing; Other, it never closed the block.
// What a real model does there is not documented anywhere this project
// found (docs/simulator.md, "After a cut observation"): this is how a run
// on one shows it.
type AfterCut struct {
	Turns   int     `json:"turns"`
	Closed  float64 `json:"closed"`
	WroteOn float64 `json:"wrote_on"`
	Stopped float64 `json:"stopped"`
	Other   float64 `json:"other"`
}

// AfterCutKind values, in display order.
const (
	AfterCutClosed  = "closed"
	AfterCutWroteOn = "wrote_on"
	AfterCutStopped = "stopped"
	AfterCutOther   = "other"
)

// AfterCutKind says what a turn that follows a cut block did, from its
// text and its number of sampled tokens: AfterCutStopped for at most one
// token (the end-of-turn token, whose text the turn may keep) or nothing
// but white space, AfterCutClosed when </information> comes first (white
// space aside), AfterCutWroteOn when it comes later, AfterCutOther when it
// never comes.
func AfterCutKind(text string, tokens int) string {
	t := strings.TrimLeft(text, " \t\r\n")
	switch {
	case tokens <= 1 || t == "":
		return AfterCutStopped
	case strings.HasPrefix(t, "</information>"):
		return AfterCutClosed
	case strings.Contains(t, "</information>"):
		return AfterCutWroteOn
	}
	return AfterCutOther
}

// NewAfterCut returns the shares of kinds (AfterCutKind values); nil for
// none.
func NewAfterCut(kinds []string) *AfterCut {
	if len(kinds) == 0 {
		return nil
	}
	a := &AfterCut{Turns: len(kinds)}
	for _, k := range kinds {
		switch k {
		case AfterCutClosed:
			a.Closed++
		case AfterCutWroteOn:
			a.WroteOn++
		case AfterCutStopped:
			a.Stopped++
		default:
			a.Other++
		}
	}
	n := float64(len(kinds))
	a.Closed, a.WroteOn, a.Stopped, a.Other = a.Closed/n, a.WroteOn/n, a.Stopped/n, a.Other/n
	return a
}

// Shares returns the shares in the order of the AfterCutKind values.
func (a *AfterCut) Shares() [4]float64 { return [4]float64{a.Closed, a.WroteOn, a.Stopped, a.Other} }

// AfterCutKinds lists the AfterCutKind values in display order.
var AfterCutKinds = []string{AfterCutClosed, AfterCutWroteOn, AfterCutStopped, AfterCutOther}

// cells writes the shares as whole percentages joined by "/" ("-" for a
// nil a).
func (a *AfterCut) cells() string {
	if a == nil {
		return "-"
	}
	s := a.Shares()
	return fmt.Sprintf("%.0f/%.0f/%.0f/%.0f", 100*s[0], 100*s[1], 100*s[2], 100*s[3])
}

// HealthLine says h in one line: the step line's health part, with the
// filter's and penalty's counts and the alarms firing.
func HealthLine(h *Health) string {
	var b strings.Builder
	fmt.Fprintf(&b, "health: searches %.2f  answered %.0f%%  invalid %.1f%%  repeated %.1f%%  retrieval errors %.1f%%",
		h.SearchesPerTrajectory, 100*h.AnswerRate, 100*h.InvalidActionRate, 100*h.RepeatedQueryRate, 100*h.RetrievalErrorRate)
	if h.GoldRetrievedRate != nil {
		fmt.Fprintf(&b, "  gold retrieved %.0f%%", 100*(*h.GoldRetrievedRate))
	}
	fmt.Fprintf(&b, "  truncated %.1f%%  think %.1f/%.1f tokens  entropy %.3f", 100*h.TruncatedRate, h.ThinkTokens, h.ResponseTokens, h.SampledEntropy)
	if h.Filtered > 0 {
		fmt.Fprintf(&b, "  filtered %d", h.Filtered)
	}
	if h.PenalisedTurns > 0 {
		fmt.Fprintf(&b, "  penalised turns %d", h.PenalisedTurns)
	}
	if h.AfterCut != nil {
		fmt.Fprintf(&b, "  after a cut (%d turns) closed/wrote on/stopped/other %s%%", h.AfterCut.Turns, h.AfterCut.cells())
	}
	for _, a := range h.Alarms {
		fmt.Fprintf(&b, "  ALARM %s -%.0f%%", a.Metric, 100*a.Fall)
	}
	return b.String()
}

// Truncation causes: Health.Truncated's keys.
const (
	TruncTurnTokens  = "turn_tokens"
	TruncContext     = "context"
	TruncTurnLimit   = "turn_limit"
	TruncObservation = "observation"
)

// TruncationCauses lists Health.Truncated's keys in display order.
var TruncationCauses = []string{TruncTurnTokens, TruncContext, TruncTurnLimit, TruncObservation}

// HealthAlarm is one watched metric's collapse: its mean over the last
// health.window steps (From to To) fell by Fall (a fraction) from its
// highest mean over an earlier window (PeakFrom to PeakTo).
type HealthAlarm struct {
	Metric   string  `json:"metric"`
	Fall     float64 `json:"fall"`
	Peak     float64 `json:"peak"`
	PeakFrom int     `json:"peak_from"`
	PeakTo   int     `json:"peak_to"`
	Now      float64 `json:"now"`
	From     int     `json:"from"`
	To       int     `json:"to"`
}

// Value returns the health metric named name (one of HealthMetrics); ok
// is false for another name, and for gold_retrieved_rate in a record
// written before it existed (v is then 0).
func (h *Health) Value(name string) (v float64, ok bool) {
	switch name {
	case "gold_retrieved_rate":
		if h.GoldRetrievedRate == nil {
			return 0, false
		}
		return *h.GoldRetrievedRate, true
	case "searches_per_trajectory":
		return h.SearchesPerTrajectory, true
	case "answer_rate":
		return h.AnswerRate, true
	case "invalid_action_rate":
		return h.InvalidActionRate, true
	case "repeated_query_rate":
		return h.RepeatedQueryRate, true
	case "retrieval_error_rate":
		return h.RetrievalErrorRate, true
	case "truncated_rate":
		return h.TruncatedRate, true
	case "response_tokens":
		return h.ResponseTokens, true
	case "think_tokens":
		return h.ThinkTokens, true
	case "sampled_entropy":
		return h.SampledEntropy, true
	}
	return 0, false
}

// HealthMetrics are Health's scalar metrics, in display order.
var HealthMetrics = []string{"searches_per_trajectory", "answer_rate", "invalid_action_rate", "repeated_query_rate",
	"retrieval_error_rate", "gold_retrieved_rate", "truncated_rate", "response_tokens", "think_tokens", "sampled_entropy"}

// Alarms computes the collapse alarms at the last of points (a run's steps
// with health, in order): each metric of watch whose mean over the last
// window points is below (1 - drop) times its highest mean over any
// window consecutive earlier points (windows ending before the last
// point). None with drop 0, fewer than window+1 points, or a peak of 0.
func Alarms(points []HealthPoint, window int, drop float64, watch []string) []HealthAlarm {
	n := len(points)
	if drop <= 0 || window < 1 || n < window+1 {
		return nil
	}
	var out []HealthAlarm
	for _, m := range watch {
		mean := func(end int) float64 { // points[end-window+1 .. end]
			s := 0.0
			for _, p := range points[end-window+1 : end+1] {
				v, _ := p.Health.Value(m)
				s += v
			}
			return s / float64(window)
		}
		now := mean(n - 1)
		peak, at := 0.0, -1
		for end := window - 1; end < n-1; end++ {
			if v := mean(end); v > peak {
				peak, at = v, end
			}
		}
		if at < 0 || peak <= 0 || now >= (1-drop)*peak {
			continue
		}
		out = append(out, HealthAlarm{Metric: m, Fall: 1 - now/peak, Peak: peak, PeakFrom: points[at-window+1].Step, PeakTo: points[at].Step,
			Now: now, From: points[n-window].Step, To: points[n-1].Step})
	}
	return out
}

// HealthPoint is one step's health, for Alarms.
type HealthPoint struct {
	Step   int
	Health *Health
}
