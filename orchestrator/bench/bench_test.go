package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The benchmark's plumbing on a tiny workload: every figure it can compute
// without the separate simulator process is produced and reported. No
// figure is compared against a target here: the bench is not a test.
func TestBenchPlumbing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs simulated scenarios")
	}
	rep, err := Run(context.Background(), Options{Recipe: "../../recipes/sim.yaml", Dir: t.TempDir(), Scale: 0.05,
		Only: []string{"speedup", "replicas"}, Seeds: []int64{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{"async_speedup": rep.AsyncSpeedup, "busy_fraction": rep.BusyFraction,
		"replica_scaling_2": rep.ReplicaScaling2, "replica_scaling_4": rep.ReplicaScaling4} {
		if !(v > 0) {
			t.Errorf("%s = %v", name, v)
		}
	}
	// Every scheduling scenario ran at each seed, and each figure is the
	// mean of its seeds' values.
	for _, seed := range []string{"-s1", "-s2"} {
		for _, sc := range []string{"async", "lockstep", "replicas-1", "replicas-2", "replicas-4"} {
			if rep.Scenarios[sc+seed]["trajectories"] == 0 {
				t.Errorf("scenario %s: %v", sc+seed, rep.Scenarios[sc+seed])
			}
		}
	}
	for key, v := range map[string]float64{"async_speedup": rep.AsyncSpeedup, "replica_scaling_4": rep.ReplicaScaling4} {
		sp := rep.Spreads[key]
		if len(sp.Values) != 2 || math.Abs(sp.Mean-(sp.Values[0]+sp.Values[1])/2) > 1e-12 || sp.Mean != v ||
			sp.Min > sp.Mean || sp.Max < sp.Mean {
			t.Errorf("%s = %v over seeds: %+v", key, v, sp)
		}
	}
	if _, ok := rep.Spreads["hindsight_overhead"]; ok {
		t.Error("hindsight_overhead has a spread although its group did not run")
	}
	b, _ := json.Marshal(rep)
	for _, k := range []string{"async_speedup", "hindsight_overhead", "busy_fraction", "cpu_us_per_turn",
		"bytes_per_inflight_token", "replica_scaling_2", "replica_scaling_4", "retriever_calls_saved", "cpu_seconds_per_paper_step", "cpu_us_per_turn_local"} {
		if !strings.Contains(string(b), `"`+k+`"`) {
			t.Errorf("JSON lacks %q", k)
		}
	}
	var out bytes.Buffer
	if err := WriteTable(&out, rep); err != nil || !strings.Contains(out.String(), "SIMULATED") ||
		!strings.Contains(out.String(), "mean over recipe seeds 1-2") {
		t.Errorf("table: %v\n%s", err, out.String())
	}
}

// The CPU figures are the median run's, whatever the order of the runs.
func TestMedianRun(t *testing.T) {
	run := func(us, bytes float64) map[string]float64 {
		return map[string]float64{"cpu_us_per_turn": us, "bytes_per_token": bytes}
	}
	for _, tc := range []struct {
		runs []map[string]float64
		want float64
	}{
		{[]map[string]float64{run(300, 1), run(150, 2), run(180, 3)}, 180},
		{[]map[string]float64{run(180, 3), run(300, 1), run(150, 2)}, 180},
		{[]map[string]float64{run(150, 2)}, 150},
		{[]map[string]float64{run(200, 1), run(100, 2)}, 100},
	} {
		got := medianRun(tc.runs, "cpu_us_per_turn")
		if got["cpu_us_per_turn"] != tc.want {
			t.Errorf("%v: median run %v, want the one at %v", tc.runs, got, tc.want)
		}
		// The run is taken whole: its other figures come with it.
		for _, r := range tc.runs {
			if r["cpu_us_per_turn"] == tc.want && r["bytes_per_token"] != got["bytes_per_token"] {
				t.Errorf("median run's other figures mixed: %v", got)
			}
		}
	}
	if medianRun(nil, "cpu_us_per_turn") != nil {
		t.Error("no runs gave a median")
	}
}

// A figure over seeds: the mean of their values, the lowest and highest,
// and the seeds named in order.
func TestSpread(t *testing.T) {
	sp := newSpread([]int64{1, 2, 3}, []float64{1.4, 1.8, 1.5})
	if math.Abs(sp.Mean-1.5666666666666667) > 1e-12 || sp.Min != 1.4 || sp.Max != 1.8 ||
		!slices.Equal(sp.Seeds, []int64{1, 2, 3}) || !slices.Equal(sp.Values, []float64{1.4, 1.8, 1.5}) {
		t.Errorf("%+v", sp)
	}
	if sp := newSpread([]int64{1, 2}, nil); sp.Mean != 0 || len(sp.Seeds) != 0 {
		t.Errorf("no values: %+v", sp)
	}
	for _, tc := range []struct {
		seeds []int64
		want  string
	}{{SeedRange(5), "1-5"}, {[]int64{1, 3, 7}, "1, 3, 7"}, {[]int64{4}, "4"}, {[]int64{2, 3}, "2-3"}} {
		if got := seedList(tc.seeds); got != tc.want {
			t.Errorf("seedList(%v) = %q, want %q", tc.seeds, got, tc.want)
		}
	}
	if len(SeedRange(0)) != 0 || !slices.Equal(DefaultSeeds(), []int64{1, 2, 3, 4, 5}) {
		t.Errorf("SeedRange(0) = %v, DefaultSeeds() = %v", SeedRange(0), DefaultSeeds())
	}
}

// The retrieval scale benchmark generates a corpus, builds and serves the
// real embedded index, and measures both query phases.
func TestRetrievalBenchmark(t *testing.T) {
	rep, err := Retrieval(context.Background(), RetrievalOptions{Passages: 300, Dir: t.TempDir(), Seconds: 0.3,
		Corpus: "../../recipes/data/corpus/passages.jsonl", Questions: []string{"../../recipes/data/qa/nq.jsonl"}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passages != 300 || rep.BuildPerSecond <= 0 || rep.IndexBytes <= 0 || len(rep.Phases) != 3 ||
		rep.RecallQuestions != 300 || !(rep.RecallAt3 > 0 && rep.RecallAt3 < 1) {
		t.Fatalf("%+v", rep)
	}
	for _, p := range rep.Phases {
		if p.Queries == 0 || p.QueriesPerSec <= 0 || p.CallP99Millis < p.CallP50Millis {
			t.Errorf("%+v", p)
		}
	}
	// The in-process phase asks every question at least once.
	if p := rep.Phases[2]; p.Name != "inproc-1thread" || p.Queries < 300 {
		t.Errorf("in-process phase: %+v", p)
	}
}

// The work line names every count a CPU run measured.
func TestWorkLine(t *testing.T) {
	c := map[string]float64{"cpu_us_per_turn": 190, "turns": 10, "turns_search": 4, "turns_answer": 5, "turns_invalid": 1,
		"searches": 4, "retriever_calls": 2, "tokenize_calls": 6, "allocs_per_turn": 250, "alloc_bytes_per_turn": 39000}
	want := "cpu: 190 us per turn over 10 turns (4 search, 5 answer, 1 invalid), 4 searches in 2 retriever calls, 6 /tokenize calls, 250 allocations (39000 bytes) per turn"
	if got := WorkLine("cpu", c); got != want {
		t.Errorf("WorkLine\n%s\nwant\n%s", got, want)
	}
}

// The documents' region is rewritten in place, the rest of the file kept
// byte for byte; a file without one region, in order, is refused and left
// as it was.
func TestWriteDocs(t *testing.T) {
	dir := t.TempDir()
	rep := &Report{AsyncSpeedup: 1.5, Seconds: 300, Spreads: map[string]Spread{"async_speedup": newSpread(SeedRange(3), []float64{1.4, 1.5, 1.6})},
		Scenarios: map[string]map[string]float64{"cpu": {"cpu_us_per_turn": 190, "turns": 10}}}
	region := DocsFigures(rep, Provenance{Commit: "abc1234", Command: "orchestrate bench", Date: "2026-12-04"})
	for _, want := range []string{"| `async_speedup` | 1.500 | 1.400-1.600 (3) | >= 1.5 |", "commit `abc1234`", "seeds 1-3",
		"cpu: 190 us per turn over 10 turns"} {
		if !strings.Contains(region, want) {
			t.Errorf("region lacks %q:\n%s", want, region)
		}
	}
	path := filepath.Join(dir, "doc.md")
	before, after := "# Title\n\ntext before\n", "\ntext after\n"
	if err := os.WriteFile(path, []byte(before+DocsBegin+"\nold figures\n"+DocsEnd+after), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // twice: the second run finds the first's region
		if err := WriteDocs(path, region); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != before+region+after {
			t.Fatalf("file after WriteDocs:\n%s", b)
		}
	}
	for name, text := range map[string]string{
		"no region": "text\n",
		"no end":    DocsBegin + "\n",
		"reversed":  DocsEnd + "\n" + DocsBegin + "\n",
		"two":       DocsBegin + DocsEnd + DocsBegin + DocsEnd,
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".md")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		err := WriteDocs(p, region)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %v, want one naming %s", name, err, p)
		}
		if b, _ := os.ReadFile(p); string(b) != text {
			t.Errorf("%s: file changed to %q", name, b)
		}
	}
}
