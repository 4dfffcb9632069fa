package orchestrator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/progress"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// scrape fetches the metrics over HTTP and returns every sample as
// "name{labels}" -> value.
func scrape(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("content type %q, want the Prometheus text format", ct)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// sum adds the samples of a metric whose labels contain every part.
func sum(samples map[string]float64, name string, parts ...string) float64 {
	total := 0.0
	for k, v := range samples {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(k, p)
		}
		if ok {
			total += v
		}
	}
	return total
}

// runScraped runs r on embedded servers with a fresh metrics registry and
// returns the samples scraped after the run.
func runScraped(t *testing.T, r *recipes.Recipe) map[string]float64 {
	t.Helper()
	m := metrics.New()
	runMetered(t, r, nil, m)
	return scrape(t, m)
}

// runMetered runs r on embedded servers connected with environ, its
// calls and steps reported to m, and returns the run's output.
func runMetered(t *testing.T, r *recipes.Recipe, environ []string, m *metrics.Metrics) string {
	t.Helper()
	ctx := context.Background()
	deps, emb, err := setup.Connect(ctx, r, environ, nil, setup.WithMetrics(m))
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	var out bytes.Buffer
	if _, err := (&Runner{Recipe: r, Deps: deps, Out: &out, Metrics: m}).Run(ctx); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	return out.String()
}

func TestMetricsScrapedAfterARun(t *testing.T) {
	r := testRecipe(t, "")
	s := runScraped(t, r)

	steps := float64(r.Train.Steps)
	if got := s["hindsearch_steps_total"]; got != steps {
		t.Errorf("steps_total = %v, want %v", got, steps)
	}
	if got := s["hindsearch_step"]; got != steps {
		t.Errorf("step = %v, want %v", got, steps)
	}
	if got := s["hindsearch_trajectories_in_flight"]; got != 0 {
		t.Errorf("trajectories in flight after the run = %v, want 0", got)
	}
	// Training trajectories plus two evaluations (steps 0 and 2) of 4
	// questions on each of 2 datasets.
	want := steps*float64(r.Train.BatchSize*r.Train.GroupSize) + 2*2*4
	if got := sum(s, "hindsearch_trajectories_total"); got != want {
		t.Errorf("trajectories_total = %v, want %v", got, want)
	}
	if got := sum(s, "hindsearch_trajectories_total", `finish="error"`); got != 0 {
		t.Errorf("%v trajectories counted as abandoned", got)
	}
	completions := sum(s, "hindsearch_requests_total", `role="policy"`, `path="/v1/completions"`, `code="200"`)
	if completions < want {
		t.Errorf("policy completions counted %v, want at least one per trajectory (%v)", completions, want)
	}
	if got := sum(s, "hindsearch_request_duration_seconds_count", `role="policy"`, `path="/v1/completions"`); got != completions {
		t.Errorf("latency histogram counted %v completions, requests_total %v", got, completions)
	}
	for _, role := range []string{"judge", "retriever", "trainer"} {
		if sum(s, "hindsearch_requests_total", `role="`+role+`"`, `code="200"`) == 0 {
			t.Errorf("no successful %s request counted", role)
		}
	}
	if got := sum(s, "hindsearch_retries_total"); got != 0 {
		t.Errorf("retries counted without faults: %v", got)
	}
	// The step gauges match the last step record.
	rd := &results.RunDir{Path: r.Output.Dir}
	recs, err := rd.ReadSteps()
	if err != nil {
		t.Fatal(err)
	}
	last := recs[len(recs)-1]
	if got := s["hindsearch_reward_mean"]; got != last.RewardMean {
		t.Errorf("reward_mean = %v, want %v", got, last.RewardMean)
	}
	crit := 0
	for _, rec := range recs {
		crit += rec.Critiques
	}
	if got := s["hindsearch_critiques_total"]; got != float64(crit) {
		t.Errorf("critiques_total = %v, want %d", got, crit)
	}
	if _, ok := s[`hindsearch_phase_seconds{phase="rollout"}`]; !ok {
		t.Errorf("no rollout phase gauge")
	}
	// The health gauges are the last record's health; no alarm fires.
	for _, m := range results.HealthMetrics {
		want, _ := last.Health.Value(m)
		if got, ok := s[`hindsearch_health{metric="`+m+`"}`]; !ok || got != want {
			t.Errorf("health{metric=%q} = %v (%v), want %v", m, got, ok, want)
		}
	}
	if got, ok := s[`hindsearch_health_truncated{cause="observation"}`]; !ok || got != last.Health.Truncated["observation"] {
		t.Errorf("health_truncated{cause=observation} = %v (%v)", got, ok)
	}
	var afterCut [4]float64
	if a := last.Health.AfterCut; a != nil {
		afterCut = a.Shares()
	}
	for i, k := range results.AfterCutKinds {
		if got, ok := s[`hindsearch_health_after_cut{kind="`+k+`"}`]; !ok || got != afterCut[i] {
			t.Errorf("health_after_cut{kind=%q} = %v (%v), want %v", k, got, ok, afterCut[i])
		}
	}
	if got, ok := s[`hindsearch_health_alarm{metric="think_tokens"}`]; !ok || got != 0 {
		t.Errorf("health_alarm{metric=think_tokens} = %v (%v), want 0", got, ok)
	}
	if _, ok := s[`hindsearch_eval_em{dataset="hotpotqa"}`]; !ok {
		t.Errorf("no eval_em gauge for hotpotqa")
	}
	if _, ok := s["go_goroutines"]; !ok {
		t.Errorf("no Go runtime metrics")
	}
}

func TestMetricsCountRetries(t *testing.T) {
	// One query a /retrieve call and no cache, so that the run makes dozens
	// of retriever calls (coalesced, it made as few as five, and 0.7^5 of
	// such runs saw no fault at all), and enough quick retries that no call
	// runs out of them (0.3^11 a call).
	r := testRecipe(t, "sim: {faults: {retriever: {rate: 0.3, kinds: ['503']}}}", "train.steps=1", "eval.every=1",
		"retriever.max_batch=1", "retriever.cache=false", "http.retries=10", "http.retry_wait_min_ms=1", "http.retry_wait_max_ms=5")
	s := runScraped(t, r)
	if calls := sum(s, "hindsearch_requests_total", `role="retriever"`, `path="/retrieve"`); calls < 20 {
		t.Fatalf("only %v /retrieve calls; the test needs dozens to be sure of faults", calls)
	}
	if got := sum(s, "hindsearch_retries_total", `role="retriever"`, `code="503"`); got == 0 {
		t.Errorf("no retriever retries after 503s; samples: %v", s)
	}
	if got := sum(s, "hindsearch_requests_total", `role="retriever"`, `code="503"`); got != 0 {
		t.Errorf("%v retriever calls ended in 503 despite retries", got)
	}
}

func TestKeptTrajectoriesCarryTokenPieces(t *testing.T) {
	r := testRecipe(t, "", "train.steps=1", "eval.every=1")
	var lines bytes.Buffer
	rep := progress.New(&lines, progress.Lines, 0)
	defer rep.Close()
	ctx := context.Background()
	deps, emb, err := setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	if _, err := (&Runner{Recipe: r, Deps: deps, Out: io.Discard, Progress: rep}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(r.Output.Dir, "trajectories", "step-0001.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		var tr rollout.Trajectory
		if err := json.Unmarshal(line, &tr); err != nil {
			t.Fatal(err)
		}
		n++
		if len(tr.Pieces) != len(tr.Tokens) {
			t.Fatalf("%s: %d pieces for %d tokens", tr.ID, len(tr.Pieces), len(tr.Tokens))
		}
		// The policy pieces of each turn concatenate to the sampled ids'
		// text: the turn's text, which ends at the stop string, and what
		// the token that completed it carried past it (">\n\n" after
		// "</search>", as Qwen2.5 tokenizes it and vLLM returns it).
		var turns []string
		var cur strings.Builder
		for i, p := range tr.Pieces {
			if tr.Policy[i] {
				cur.WriteString(p)
			} else if p != "" {
				t.Fatalf("%s: environment token %d has text %q", tr.ID, i, p)
			}
			if cur.Len() > 0 && (i+1 == len(tr.Pieces) || !tr.Policy[i+1]) {
				turns = append(turns, cur.String())
				cur.Reset()
			}
		}
		if len(turns) != len(tr.Turns) {
			t.Fatalf("%s: %d policy runs, %d turns", tr.ID, len(turns), len(tr.Turns))
		}
		for i, txt := range turns {
			past, ok := strings.CutPrefix(txt, tr.Turns[i].Text)
			if !ok || len(past) > 8 || strings.TrimSpace(past) != "" {
				t.Errorf("%s turn %d: pieces give %q, text is %q", tr.ID, i, txt, tr.Turns[i].Text)
			}
		}
	}
	if n != r.Output.Trajectories {
		t.Errorf("kept %d trajectories, want %d", n, r.Output.Trajectories)
	}
}

func TestPruneTrajectoriesKeepsRecentAndEvalSteps(t *testing.T) {
	dir := t.TempDir()
	for s := 1; s <= 30; s++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("step-%04d.jsonl", s)), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := pruneTrajectories(dir, 30, 5, 8); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	want := []string{"notes.txt", "step-0008.jsonl", "step-0016.jsonl", "step-0024.jsonl",
		"step-0026.jsonl", "step-0027.jsonl", "step-0028.jsonl", "step-0029.jsonl", "step-0030.jsonl"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("kept %v, want %v", got, want)
	}
	// keep 0 keeps everything.
	if err := pruneTrajectories(dir, 100, 0, 8); err != nil {
		t.Fatal(err)
	}
	if ents2, _ := os.ReadDir(dir); len(ents2) != len(ents) {
		t.Errorf("keep 0 removed files")
	}
}

func TestRunRefusesWhenEveryTrainingQuestionIsEvaluated(t *testing.T) {
	r := testRecipe(t, "", "eval.per_dataset=0", "train.data="+filepath.Join(dataDir, "qa", "nq.jsonl"))
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	_, err = (&Runner{Recipe: r, Deps: deps}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "train.data: every training question is also an evaluation question") {
		t.Errorf("error %v", err)
	}
}

// The kept trajectories' JSON is the contract between the orchestrator and
// orchestrate show (results.TrajectoryRecord): every field goes both ways.
func TestTrajectoryJSONMatchesResultsRecord(t *testing.T) {
	tr := rollout.Trajectory{ID: "s0001-g000001-k0", Step: 1, Group: 1, Sample: 0, Model: "m",
		Question:  dataset.Question{ID: "q1", Question: "who?", Golds: []string{"a"}, Dataset: "nq"},
		PromptIDs: []int{1, 2}, Tokens: []int{3, 4, 5}, Policy: []bool{true, false, true}, Search: []bool{true, false, false},
		Logprobs: []float64{-0.5, 0, -1}, Turns: []rollout.Turn{{Text: "x", Action: "search", Content: "q", Titles: []string{"T"}, Finish: "stop"}},
		Response: "xy", Answer: "a", Answered: true, Finish: "answer", Reward: 1, F1: 1, Advantage: 0.5,
		Critique: "c", CritiqueError: "e", OPD: []float64{0.1, 0, 0}, Pieces: []string{"x", "", "y"}}
	raw, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	var rec results.TrajectoryRecord
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		t.Fatalf("orchestrator field unknown to results.TrajectoryRecord: %v", err)
	}
	back, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var m1, m2 map[string]any
	_ = json.Unmarshal(raw, &m1)
	_ = json.Unmarshal(back, &m2)
	if fmt.Sprint(m1) != fmt.Sprint(m2) {
		t.Errorf("round trip through results.TrajectoryRecord changed the record:\n%v\n%v", m1, m2)
	}
}

// A step whose health has an alarm sets that metric's alarm gauge to 1
// and the others to 0; the next step without it sets it back to 0.
func TestHealthAlarmGauge(t *testing.T) {
	m := metrics.New()
	h := &results.Health{ThinkTokens: 3, Truncated: map[string]float64{}, Filtered: 2, Alarms: []results.HealthAlarm{{Metric: "think_tokens", Fall: 0.6}}}
	m.RecordStep(&results.StepRecord{Step: 1, Health: h})
	s := scrape(t, m)
	if s[`hindsearch_health_alarm{metric="think_tokens"}`] != 1 || s[`hindsearch_health_alarm{metric="answer_rate"}`] != 0 ||
		s[`hindsearch_health{metric="think_tokens"}`] != 3 || s["hindsearch_filtered_total"] != 2 {
		t.Errorf("after the alarm: %v", s)
	}
	m.RecordStep(&results.StepRecord{Step: 2, Health: &results.Health{ThinkTokens: 4, Truncated: map[string]float64{}}})
	if s := scrape(t, m); s[`hindsearch_health_alarm{metric="think_tokens"}`] != 0 {
		t.Errorf("the alarm gauge stayed up")
	}
}
