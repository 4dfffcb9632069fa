package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// abnormalGroup is a hand-made group of six trajectories, one clean and
// one committing each abnormal cause, with its turns' token spans: each
// turn is three policy tokens followed by two environment tokens.
func abnormalGroup() []*rollout.Trajectory {
	mk := func(sample int, reward float64, finish string, turns ...rollout.Turn) *rollout.Trajectory {
		t := &rollout.Trajectory{ID: "t", Group: 7, Sample: sample, PromptIDs: []int{1, 2, 3}, Finish: finish, Reward: reward}
		for i, tr := range turns {
			tr.From = len(t.Tokens)
			for k := 0; k < 3; k++ {
				t.Tokens = append(t.Tokens, 100+10*i+k)
				t.Policy = append(t.Policy, true)
				t.Search = append(t.Search, false)
				t.Logprobs = append(t.Logprobs, -0.1*float64(k+1))
			}
			tr.To = len(t.Tokens)
			t.Turns = append(t.Turns, tr)
			t.Tokens = append(t.Tokens, 5, 6)
			t.Policy = append(t.Policy, false, false)
			t.Search = append(t.Search, false, false)
			t.Logprobs = append(t.Logprobs, 0, 0)
		}
		t.Answered = turns[len(turns)-1].Action == format.ActionAnswer
		return t
	}
	search := func(q string) rollout.Turn { return rollout.Turn{Action: format.ActionSearch, Content: q} }
	answer := rollout.Turn{Action: format.ActionAnswer, Content: "x"}
	failed := search("b")
	failed.RetrievalError = "500 Internal Server Error"
	repeated := search("a")
	repeated.Repeated = true
	cut := rollout.Turn{Cut: rollout.CutTurnTokens}
	return []*rollout.Trajectory{
		mk(0, 1, "answer", search("a"), answer),                      // clean
		mk(1, 0, "answer", search("a"), rollout.Turn{}, answer),      // invalid_action: turn 1
		mk(2, 0, "answer", cut, answer),                              // truncation: turn 0
		mk(3, 1, "answer", failed, answer),                           // retrieval_error: turn 0
		mk(4, 0, "answer", search("a"), repeated, answer),            // repeated_query: turn 1
		mk(5, 0, "max_turns", search("a"), search("c"), search("d")), // no_answer (and truncation: turn limit): turn 2
	}
}

// offending is, per sample of abnormalGroup, the turn each cause marks.
var offending = map[string]map[int]int{
	// The cut turn holds no action either.
	recipes.AbnormalInvalidAction:  {1: 1, 2: 0},
	recipes.AbnormalTruncation:     {2: 0, 5: 2},
	recipes.AbnormalRetrievalError: {3: 0},
	recipes.AbnormalRepeatedQuery:  {4: 1},
	recipes.AbnormalNoAnswer:       {5: 2},
}

// datumsOf builds the datums of abnormalGroup under a recipe with sets.
func datumsOf(t *testing.T, sets ...string) (map[int][]float64, *collected, []*rollout.Trajectory) {
	t.Helper()
	r := testRecipe(t, "", append([]string{"hindsight.enabled=false", "trainer.kl_coef=0", "trainer.entropy_coef=0"}, sets...)...)
	ru := &run{Runner: &Runner{advantageSign: 1}, r: r}
	g := &groupState{trajs: abnormalGroup()}
	rewards := make([]float64, len(g.trajs))
	for i, tr := range g.trajs {
		rewards[i] = tr.Reward
	}
	for i, a := range GroupAdvantages(rewards, true) {
		g.trajs[i].Advantage = a
	}
	c := &collected{}
	ds, err := ru.groupDatums(context.Background(), c, g)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]float64{}
	for _, d := range ds {
		var adv []float64
		for _, v := range d.datum.LossFnInputs["advantages"].Data.([]float32) {
			adv = append(adv, float64(v))
		}
		out[d.sample] = adv
	}
	return out, c, g.trajs
}

// Each train.filter cause keeps exactly the trajectories that commit it
// out of the loss, and changes nothing in the others' datums: the group's
// advantages are computed over all six, filtered ones included, as
// SearchAgent-Zero masks a trajectory after its group's statistics.
func TestFilterDropsEachCause(t *testing.T) {
	all, _, trajs := datumsOf(t)
	if len(all) != 6 {
		t.Fatalf("%d datums without a filter, want 6", len(all))
	}
	for _, cause := range recipes.AbnormalCauses {
		got, c, _ := datumsOf(t, "train.filter="+cause)
		for s := range 6 {
			_, hit := offending[cause][s]
			_, kept := got[s]
			if hit == kept {
				t.Errorf("filter %s: sample %d kept %v, commits it %v", cause, s, kept, hit)
			}
			if kept && !slices.Equal(got[s], all[s]) {
				t.Errorf("filter %s: sample %d's advantages changed", cause, s)
			}
		}
		if int(c.filtered.Load()) != len(offending[cause]) {
			t.Errorf("filter %s: counted %d, want %d", cause, c.filtered.Load(), len(offending[cause]))
		}
	}
	// The clean trajectory's advantage is the group's over six rewards.
	if want := GroupAdvantages([]float64{1, 0, 0, 1, 0, 0}, true)[0]; math.Abs(trajs[0].Advantage-want) > 1e-12 {
		t.Errorf("advantage %v, want %v", trajs[0].Advantage, want)
	}
}

// rollout.turn_penalty lowers the advantage of exactly the offending
// turn's policy tokens, for each cause it can be put on; the other
// tokens, environment tokens and other trajectories keep theirs.
func TestTurnPenaltyOnTheOffendingTurnOnly(t *testing.T) {
	all, _, trajs := datumsOf(t)
	for _, cause := range recipes.PenaltyCauses {
		got, c, _ := datumsOf(t, "rollout.turn_penalty=0.5", "rollout.turn_penalty_causes="+cause)
		for s := range 6 {
			turn, hit := offending[cause][s]
			p := len(trajs[s].PromptIDs)
			for i := range got[s] {
				j := i + 1 - p // the response token position i predicts
				want := all[s][i]
				if hit && j >= 0 {
					tr := trajs[s].Turns[turn]
					if j >= tr.From && j < tr.To {
						want -= 0.5
					}
				}
				if math.Abs(got[s][i]-want) > 1e-6 {
					t.Fatalf("penalty on %s: sample %d position %d: advantage %v, want %v", cause, s, i, got[s][i], want)
				}
			}
		}
		if int(c.penalised.Load()) != len(offending[cause]) {
			t.Errorf("penalty on %s: %d turns penalised, want %d", cause, c.penalised.Load(), len(offending[cause]))
		}
	}
}

// The collapse alarm fires when a watched metric's window mean falls
// below (1 - drop) of its peak, and says since when; it does not fire on
// a metric that holds or falls less.
func TestCollapseAlarm(t *testing.T) {
	pts := func(think ...float64) []results.HealthPoint {
		var out []results.HealthPoint
		for i, v := range think {
			out = append(out, results.HealthPoint{Step: i + 1, Health: &results.Health{ThinkTokens: v, AnswerRate: 0.9}})
		}
		return out
	}
	watch := []string{"think_tokens", "answer_rate"}
	got := results.Alarms(pts(40, 42, 41, 30, 12, 10), 2, 0.5, watch)
	if len(got) != 1 || got[0].Metric != "think_tokens" || got[0].PeakFrom != 2 || got[0].PeakTo != 3 || got[0].From != 5 || got[0].To != 6 {
		t.Fatalf("alarms %+v, want think_tokens since steps 2-3", got)
	}
	if w := alarmWords(got[0], 2); !strings.Contains(w, "think tokens fell 73% since step 3") {
		t.Errorf("words: %s", w)
	}
	for _, quiet := range [][]float64{{40, 42, 41, 30, 25, 24}, {40, 42}, {0, 0, 0, 0}} {
		if got := results.Alarms(pts(quiet...), 2, 0.5, watch); len(got) != 0 {
			t.Errorf("%v: alarms %+v, want none", quiet, got)
		}
	}
	if got := results.Alarms(pts(40, 42, 41, 30, 12, 10), 2, 0, watch); len(got) != 0 {
		t.Errorf("drop 0 fired: %+v", got)
	}
}

// The simulator's abnormal agent and a failing retriever move every
// health metric in a run's records, the collapsing thoughts fire the
// alarm (in the record, the warning line and the metric), and the filter
// keeps trajectories out of what is sent.
func TestHealthOfAnAbnormalRun(t *testing.T) {
	sets := []string{"eval.datasets.nq=", "eval.datasets.hotpotqa=", "train.steps=3", "hindsight.enabled=false"}
	clean, _ := runRecipe(t, testRecipe(t, "", sets...), 1)
	// One search per /retrieve call: every search meets the fault rate.
	bad := testRecipe(t, "", append(sets, "sim.agent.invalid_rate=0.15", "sim.agent.repeat_rate=0.3", "sim.agent.ramble_rate=0.1",
		"sim.faults.retriever.rate=0.3", "sim.faults.retriever.kinds=500", "http.retries=0", "retriever.max_batch=1",
		"retriever.max_error_rate=1", "train.filter=retrieval_error,truncation")...)
	sum, rec := runRecorded(t, bad)
	h0, h := clean.Steps[0].Health, sum.Steps[0].Health
	if h0 == nil || h == nil {
		t.Fatal("no health recorded")
	}
	for _, m := range []string{"invalid_action_rate", "repeated_query_rate", "retrieval_error_rate", "truncated_rate"} {
		v0, _ := h0.Value(m)
		v, _ := h.Value(m)
		if !(v > v0) {
			t.Errorf("%s: %v with the abnormal agent, %v without", m, v, v0)
		}
	}
	if h0.RetrievalErrorRate != 0 || h.Truncated[results.TruncTurnTokens] <= 0 || h0.Truncated[results.TruncTurnTokens] != 0 {
		t.Errorf("retrieval errors %v without faults; turn-token cuts %v with rambling, %v without", h0.RetrievalErrorRate,
			h.Truncated[results.TruncTurnTokens], h0.Truncated[results.TruncTurnTokens])
	}
	// The thoughts collapse as training moves the weights: the alarm
	// fires, in the record and on the output; not in the clean run.
	collapse := testRecipe(t, "", append(sets, "sim.agent.think_collapse=0.6", "health.window=1", "health.drop=0.3")...)
	csum, out := runRecipe(t, collapse, 1)
	first, last := csum.Steps[0].Health, csum.Steps[len(csum.Steps)-1].Health
	if !(last.ThinkTokens < 0.7*first.ThinkTokens) || len(last.Alarms) == 0 || last.Alarms[0].Metric != "think_tokens" {
		t.Errorf("think tokens %v -> %v, alarms %+v: want a collapse and its alarm", first.ThinkTokens, last.ThinkTokens, last.Alarms)
	}
	if !strings.Contains(out, "collapse alarm: think tokens fell") {
		t.Errorf("no warning line:\n%s", out)
	}
	for _, s := range clean.Steps {
		if len(s.Health.Alarms) != 0 {
			t.Errorf("step %d of the clean run: alarms %+v", s.Step, s.Health.Alarms)
		}
	}
	// Every step filtered some, and sent one datum fewer for each.
	ds, _ := rec.miniBatches(t)
	sent := 0
	for _, mb := range ds {
		sent += len(mb)
	}
	filtered := 0
	for _, s := range sum.Steps {
		filtered += s.Health.Filtered
	}
	if filtered == 0 || sent != 3*16-filtered {
		t.Errorf("%d datums sent, %d filtered, of 48 trajectories", sent, filtered)
	}
}

// outage answers the preflight's probe, then fails every search.
type outage struct {
	retriever.Retriever
	calls atomic.Int64
}

func (o *outage) Retrieve(ctx context.Context, queries []string, topk int) ([][]retriever.Hit, error) {
	if o.calls.Add(1) == 1 {
		return o.Retriever.Retrieve(ctx, queries, topk)
	}
	return nil, fmt.Errorf("%s: POST /retrieve: status 503", o.URL())
}

// retriever.on_error fail makes a failed search fail the step, as
// Search-R1's loop does; retriever.max_error_rate fails a step with too
// many failed searches and says what to do.
func TestRetrievalErrorsStopTheRun(t *testing.T) {
	for _, tc := range []struct {
		set, want string
	}{
		{"retriever.on_error=fail", "retrieve: "},
		{"retriever.max_error_rate=0.5", "above retriever.max_error_rate 0.5"},
	} {
		r := testRecipe(t, "", "eval.datasets.nq=", "eval.datasets.hotpotqa=", "train.steps=1", tc.set)
		ctx := context.Background()
		deps, emb, err := setup.Connect(ctx, r, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		deps.Retriever = &outage{Retriever: deps.Retriever}
		var out bytes.Buffer
		_, err = (&Runner{Recipe: r, Deps: deps, Out: &out}).Run(ctx)
		emb.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "status 503") {
			t.Errorf("%s: err %v, want one saying %q and the retriever's error", tc.set, err, tc.want)
		}
	}
}

// A resumed run keeps the health history its alarm compares with: the
// collapse alarm at step 3 fires as in an uninterrupted run, and every
// step's health is recorded once.
func TestCollapseAlarmAcrossResume(t *testing.T) {
	sets := []string{"eval.datasets.nq=", "eval.datasets.hotpotqa=", "train.steps=3", "hindsight.enabled=false",
		"sim.agent.think_collapse=0.6", "health.window=1", "health.drop=0.3"}
	whole, _ := runRecipe(t, testRecipe(t, "", sets...), 1)
	resumed, _, _, _ := interruptThenResume(t, testRecipe(t, "", sets...), 2)
	if len(resumed.Steps) != 3 {
		t.Fatalf("%d steps after resume", len(resumed.Steps))
	}
	for i, s := range resumed.Steps {
		w := whole.Steps[i].Health
		if s.Health == nil || len(s.Health.Alarms) != len(w.Alarms) || s.Health.ThinkTokens != w.ThinkTokens {
			t.Errorf("step %d: health %+v after resume, %+v uninterrupted", s.Step, s.Health, w)
		}
	}
	if len(whole.Steps[2].Health.Alarms) == 0 {
		t.Error("no alarm at step 3: the test's premise")
	}
}

// What the policy writes after a cut <information> block is recorded per
// step (health.after_cut) and said in the health line: the simulated agent
// closes the block itself, and at sim.agent.cut_stop_rate it stops
// instead, an invalid turn counted as one.
func TestAfterCutHealth(t *testing.T) {
	sets := []string{"eval.datasets.nq=", "eval.datasets.hotpotqa=", "train.steps=2", "hindsight.enabled=false",
		"rollout.max_obs_tokens=120"}
	shares := func(sum *Summary) (turns int, closed, stopped float64) {
		for _, s := range sum.Steps {
			if a := s.Health.AfterCut; a != nil {
				turns += a.Turns
				closed += a.Closed * float64(a.Turns)
				stopped += a.Stopped * float64(a.Turns)
			}
		}
		if turns == 0 {
			t.Fatal("no turn after a cut block: the test needs some")
		}
		return turns, closed / float64(turns), stopped / float64(turns)
	}
	clean, out := runRecipe(t, testRecipe(t, "", sets...), 1)
	n, closed, stopped := shares(clean)
	if closed != 1 || stopped != 0 {
		t.Errorf("the agent closed %.2f and stopped %.2f of %d cut blocks; want every one closed", closed, stopped, n)
	}
	if !strings.Contains(out, "after a cut (") || !strings.Contains(out, "closed/wrote on/stopped/other 100/0/0/0%") {
		t.Errorf("the health line does not say it:\n%s", out)
	}
	half, _ := runRecipe(t, testRecipe(t, "", append(sets, "sim.agent.cut_stop_rate=0.5")...), 1)
	n, closed, stopped = shares(half)
	if math.Abs(closed+stopped-1) > 1e-9 || stopped < 0.25 || stopped > 0.75 {
		t.Errorf("at cut_stop_rate 0.5 the agent closed %.2f and stopped %.2f of %d cut blocks", closed, stopped, n)
	}
	if !(half.Steps[0].Health.InvalidActionRate > clean.Steps[0].Health.InvalidActionRate) {
		t.Errorf("invalid-action rate %v with stops, %v without", half.Steps[0].Health.InvalidActionRate, clean.Steps[0].Health.InvalidActionRate)
	}
}

// gold_retrieved_rate is the share of a step's trajectories with a search
// turn that showed a gold answer, each trajectory counted once however
// many of its turns did; a trajectory that never searches counts as not
// shown one.
func TestGoldRetrievedRate(t *testing.T) {
	search := func(gold bool) rollout.Turn {
		return rollout.Turn{Action: format.ActionSearch, Content: "q", GoldRetrieved: gold}
	}
	answer := rollout.Turn{Action: format.ActionAnswer, Content: "x"}
	traj := func(turns ...rollout.Turn) *rollout.Trajectory {
		return &rollout.Trajectory{Turns: turns, Finish: "answer", Answered: true}
	}
	for _, c := range []struct {
		name string
		all  []*rollout.Trajectory
		want float64
	}{
		{"no trajectories", nil, 0},
		{"one search that showed it", []*rollout.Trajectory{traj(search(true), answer)}, 1},
		{"no search", []*rollout.Trajectory{traj(answer)}, 0},
		{"searches that did not", []*rollout.Trajectory{traj(search(false), search(false), answer)}, 0},
		{"counted once per trajectory", []*rollout.Trajectory{traj(search(true), search(true), answer), traj(answer)}, 0.5},
		{"the second search", []*rollout.Trajectory{traj(search(false), search(true), answer), traj(search(false), answer),
			traj(answer), traj(search(true))}, 0.5},
	} {
		h := stepHealth(c.all)
		got, ok := h.Value("gold_retrieved_rate")
		if !ok || h.GoldRetrievedRate == nil || got != c.want {
			t.Errorf("%s: gold_retrieved_rate %v (recorded %v), want %v", c.name, got, ok, c.want)
		}
		if line := results.HealthLine(h); !strings.Contains(line, fmt.Sprintf("gold retrieved %.0f%%", 100*c.want)) {
			t.Errorf("%s: health line %s", c.name, line)
		}
	}
}

// In a simulated run the passages the agent reads often hold the answer:
// the training steps and the search evaluation record a share above 0;
// with rollout.max_obs_tokens cutting every block before its first passage
// the policy is shown none, and the share is 0 though the same searches
// retrieved them.
func TestGoldRetrievedInARun(t *testing.T) {
	sets := []string{"eval.datasets.nq=", "train.steps=1", "hindsight.enabled=false"}
	whole, out := runRecipe(t, testRecipe(t, "", sets...), 1)
	// "\n\n<information>Doc" is five tokens or so: no passage text is left.
	cut, _ := runRecipe(t, testRecipe(t, "", append(sets, "rollout.max_obs_tokens=4")...), 1)
	rate := func(h *results.Health) float64 {
		v, ok := h.Value("gold_retrieved_rate")
		if !ok {
			t.Fatal("no gold_retrieved_rate recorded")
		}
		return v
	}
	if got := rate(whole.Steps[0].Health); !(got > 0 && got <= 1) {
		t.Errorf("step 1: gold_retrieved_rate %v, want some", got)
	}
	if got := rate(cut.Steps[0].Health); got != 0 || cut.Steps[0].Health.Truncated[results.TruncObservation] == 0 {
		t.Errorf("every block cut to 4 tokens: gold_retrieved_rate %v, want 0 (observation cuts %v)", got,
			cut.Steps[0].Health.Truncated[results.TruncObservation])
	}
	evaluated := 0
	for _, e := range whole.Evals {
		if e.Strategy != format.StrategySearch {
			continue
		}
		evaluated++
		if e.Health == nil || rate(e.Health) < 0 || rate(e.Health) > 1 {
			t.Errorf("eval step %d %s: health %+v", e.Step, e.Dataset, e.Health)
		}
	}
	if evaluated == 0 || !strings.Contains(out, "  gold retrieved ") {
		t.Errorf("%d search evaluations; the step line says gold retrieved: %v", evaluated, strings.Contains(out, "  gold retrieved "))
	}
}
