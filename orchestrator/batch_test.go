package orchestrator

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/recipes"
)

func TestGroupAdvantages(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

	for _, rs := range [][]float64{{0, 0, 0, 0, 0}, {1, 1, 1}, {0.5}} {
		for i, a := range GroupAdvantages(rs, false) {
			if a != 0 {
				t.Errorf("GroupAdvantages(%v)[%d] = %v, want 0", rs, i, a)
			}
		}
	}
	if got := GroupAdvantages(nil, false); len(got) != 0 {
		t.Errorf("GroupAdvantages(nil, false) = %v", got)
	}

	// [1,0,0,0]: mean 1/4, population variance (9/16 + 3/16)/4 = 3/16,
	// std = sqrt(3)/4.
	std := math.Sqrt(3) / 4
	got := GroupAdvantages([]float64{1, 0, 0, 0}, false)
	want := []float64{0.75 / (std + 1e-6), -0.25 / (std + 1e-6), -0.25 / (std + 1e-6), -0.25 / (std + 1e-6)}
	for i := range want {
		if !near(got[i], want[i]) {
			t.Errorf("GroupAdvantages([1,0,0,0])[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if math.Abs(got[0]-math.Sqrt(3)) > 1e-4 {
		t.Errorf("GroupAdvantages([1,0,0,0])[0] = %v, want about sqrt(3)", got[0])
	}

	// Population, not sample, standard deviation: [1,0] gives about +-1
	// (the sample std would give +-0.707).
	got = GroupAdvantages([]float64{1, 0}, false)
	if !near(got[0], 0.5/(0.5+1e-6)) || !near(got[1], -0.5/(0.5+1e-6)) {
		t.Errorf("GroupAdvantages([1,0]) = %v, want about [1 -1]", got)
	}
	// Advantages sum to zero.
	got = GroupAdvantages([]float64{0.2, 1, 0, 0.7, 0.1}, false)
	sum := 0.0
	for _, a := range got {
		sum += a
	}
	if !near(sum, 0) {
		t.Errorf("advantages sum to %v", sum)
	}
}

// datumTrajectory: prompt 10 11 12; response 20 21 (policy) 30 31
// (environment) 22 (policy).
func datumTrajectory() *rollout.Trajectory {
	return &rollout.Trajectory{
		PromptIDs: []int{10, 11, 12},
		Tokens:    []int{20, 21, 30, 31, 22},
		Policy:    []bool{true, true, false, false, true},
		Search:    []bool{true, true, false, false, false},
		Logprobs:  []float64{-0.1, -0.2, 0, 0, -0.3},
		Advantage: 0.5,
		OPD:       []float64{0.1, 0.2, 0, 0, 0.4},
	}
}

func tensor[T any](t *testing.T, d trainer.Datum, name, dtype string) []T {
	t.Helper()
	td, ok := d.LossFnInputs[name]
	if !ok {
		t.Fatalf("no %s", name)
	}
	if td.Dtype != dtype {
		t.Errorf("%s dtype %q, want %q", name, td.Dtype, dtype)
	}
	v, ok := td.Data.([]T)
	if !ok {
		t.Fatalf("%s data is %T", name, td.Data)
	}
	if !reflect.DeepEqual(td.Shape, []int{len(v)}) {
		t.Errorf("%s shape %v for %d values", name, td.Shape, len(v))
	}
	return v
}

func TestBuildDatum(t *testing.T) {
	for _, c := range []struct{ sign, coef float64 }{{1, 2}, {-1, 2}, {1, 0}} {
		tr := datumTrajectory()
		d := BuildDatum(tr, Terms{Sign: c.sign, OPDCoef: c.coef}, nil)
		n := len(tr.PromptIDs) + len(tr.Tokens) - 1
		if len(d.ModelInput.Chunks) != 1 || d.ModelInput.Chunks[0].Type != "encoded_text" {
			t.Fatalf("chunks = %+v", d.ModelInput.Chunks)
		}
		if got, want := d.ModelInput.Chunks[0].Tokens, []int{10, 11, 12, 20, 21, 30, 31}; !reflect.DeepEqual(got, want) {
			t.Errorf("model input %v, want %v", got, want)
		}
		if len(d.LossFnInputs) != 4 {
			t.Errorf("loss_fn_inputs has %d entries, want 4", len(d.LossFnInputs))
		}
		target := tensor[int64](t, d, "target_tokens", "int64")
		lps := tensor[float32](t, d, "logprobs", "float32")
		adv := tensor[float32](t, d, "advantages", "float32")
		w := tensor[float32](t, d, "weights", "float32")
		for name, l := range map[string]int{"target_tokens": len(target), "logprobs": len(lps), "advantages": len(adv), "weights": len(w)} {
			if l != n {
				t.Errorf("%s has %d entries, want len(prompt)+len(response)-1 = %d", name, l, n)
			}
		}
		// Position i predicts token i+1.
		full := append(append([]int(nil), tr.PromptIDs...), tr.Tokens...)
		for i := range n {
			if target[i] != int64(full[i+1]) {
				t.Errorf("target[%d] = %d, want %d", i, target[i], full[i+1])
			}
		}
		a := func(j int) float32 { return float32(c.sign*tr.Advantage + c.coef*tr.OPD[j]) }
		wantLP := []float32{0, 0, -0.1, -0.2, 0, 0, -0.3}
		wantAdv := []float32{0, 0, a(0), a(1), 0, 0, a(4)}
		wantW := []float32{0, 0, 1, 1, 0, 0, 1}
		if !reflect.DeepEqual(lps, wantLP) || !reflect.DeepEqual(adv, wantAdv) || !reflect.DeepEqual(w, wantW) {
			t.Errorf("sign %v coef %v:\n logprobs %v, want %v\n advantages %v, want %v\n weights %v, want %v",
				c.sign, c.coef, lps, wantLP, adv, wantAdv, w, wantW)
		}
	}

	// Without an OPD term the advantage is sign * A on every policy token.
	tr := datumTrajectory()
	tr.OPD = nil
	adv := tensor[float32](t, BuildDatum(tr, Terms{Sign: -1, OPDCoef: 5}, nil), "advantages", "float32")
	if want := []float32{0, 0, -0.5, -0.5, 0, 0, -0.5}; !reflect.DeepEqual(adv, want) {
		t.Errorf("advantages without OPD = %v, want %v", adv, want)
	}

	// The input slices are not aliased by the datum.
	tr = datumTrajectory()
	d := BuildDatum(tr, Terms{Sign: 1, OPDCoef: 1}, nil)
	d.ModelInput.Chunks[0].Tokens[0] = 999
	if tr.PromptIDs[0] != 10 {
		t.Error("BuildDatum aliases the trajectory's prompt ids")
	}
}

// keysOf returns the sorted keys of a JSON object, failing if v is not one.
func keysOf(t *testing.T, v any, what string) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s is %T, want an object", what, v)
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestDatumJSONIsTinkerShape(t *testing.T) {
	b, err := json.Marshal(BuildDatum(datumTrajectory(), Terms{Sign: 1, OPDCoef: 1}, nil))
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if ks := keysOf(t, v, "datum"); !slices.Equal(ks, []string{"loss_fn_inputs", "model_input"}) {
		t.Errorf("datum keys %v", ks)
	}
	root := v.(map[string]any)
	if ks := keysOf(t, root["model_input"], "model_input"); !slices.Equal(ks, []string{"chunks"}) {
		t.Errorf("model_input keys %v", ks)
	}
	chunks, ok := root["model_input"].(map[string]any)["chunks"].([]any)
	if !ok || len(chunks) != 1 {
		t.Fatalf("chunks = %v", root["model_input"])
	}
	if ks := keysOf(t, chunks[0], "chunk"); !slices.Equal(ks, []string{"tokens", "type"}) {
		t.Errorf("chunk keys %v", ks)
	}
	chunk := chunks[0].(map[string]any)
	if chunk["type"] != "encoded_text" {
		t.Errorf("chunk type %v", chunk["type"])
	}
	tokens, _ := chunk["tokens"].([]any)
	lfi := root["loss_fn_inputs"]
	if ks := keysOf(t, lfi, "loss_fn_inputs"); !slices.Equal(ks, []string{"advantages", "logprobs", "target_tokens", "weights"}) {
		t.Errorf("loss_fn_inputs keys %v", ks)
	}
	for name, dtype := range map[string]string{"target_tokens": "int64", "logprobs": "float32", "advantages": "float32", "weights": "float32"} {
		td := lfi.(map[string]any)[name]
		if ks := keysOf(t, td, name); !slices.Equal(ks, []string{"data", "dtype", "shape"}) {
			t.Errorf("%s keys %v", name, ks)
		}
		m := td.(map[string]any)
		data, _ := m["data"].([]any)
		if m["dtype"] != dtype || len(data) != len(tokens) || !reflect.DeepEqual(m["shape"], []any{float64(len(tokens))}) {
			t.Errorf("%s = %v, want dtype %s and %d values of shape [%d]", name, m, dtype, len(tokens), len(tokens))
		}
		for _, x := range data {
			if _, ok := x.(float64); !ok {
				t.Errorf("%s holds %T, want numbers", name, x)
			}
		}
	}
}

func TestBatchDigest(t *testing.T) {
	var ds []keyedDatum
	for g := range 3 {
		for k := range 4 {
			tr := datumTrajectory()
			tr.Advantage = float64(g) - float64(k)/4
			tr.Tokens[4] = 40 + g*4 + k
			ds = append(ds, keyedDatum{group: 100 + g, sample: k, datum: BuildDatum(tr, Terms{Sign: 1, OPDCoef: 1}, nil)})
		}
	}
	want := batchDigest(ds)
	if len(want) != 64 {
		t.Fatalf("digest %q is not hex sha256", want)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		sh := slices.Clone(ds)
		rng.Shuffle(len(sh), func(i, j int) { sh[i], sh[j] = sh[j], sh[i] })
		if got := batchDigest(sh); got != want {
			t.Fatalf("digest depends on order: %s != %s", got, want)
		}
	}
	if ds[0].group != 100 || ds[0].sample != 0 {
		t.Error("batchDigest reordered its input")
	}

	// One advantage changed, the digest changes.
	tr := datumTrajectory()
	tr.Advantage = 0.25
	tr.Tokens[4] = 40 + 1*4 + 2
	ch := slices.Clone(ds)
	ch[6] = keyedDatum{group: 101, sample: 2, datum: BuildDatum(tr, Terms{Sign: 1, OPDCoef: 1}, nil)}
	if batchDigest(ch) == want {
		t.Error("digest unchanged after changing one advantage")
	}
	// Swapping the keys of two datums changes it too (canonical order is
	// by group, then sample, not by content).
	sw := slices.Clone(ds)
	sw[0].datum, sw[1].datum = sw[1].datum, sw[0].datum
	if batchDigest(sw) == want {
		t.Error("digest unchanged after swapping two samples' datums")
	}
	if batchDigest(nil) == want || batchDigest(nil) != batchDigest([]keyedDatum{}) {
		t.Error("empty batch digest")
	}
}

// Under hindsight.term_agg search-mean the datum's advantage leaves the
// term out, and termPositions lays it at exactly the positions the
// advantage route puts it (position i predicts token i+1), counting the
// term tokens: the search tokens under broadcast search (the response's
// token 22 is a policy token off the search span: it counts only under
// broadcast response, and its term goes with it).
func TestTermPositionsMatchTheAdvantageRoute(t *testing.T) {
	tr := datumTrajectory()
	tr.Advantage = 0
	apart := tensor[float32](t, BuildDatum(tr, Terms{Sign: 1, OPDCoef: 1, OPDApart: true}, nil), "advantages", "float32")
	if want := make([]float32, len(apart)); !reflect.DeepEqual(apart, want) {
		t.Errorf("advantages with the term apart %v, want %v", apart, want)
	}
	tr.OPD = []float64{0.1, 0.2, 0, 0, 0} // broadcast search: nothing off the span
	inAdv := tensor[float32](t, BuildDatum(tr, Terms{Sign: 1, OPDCoef: 1}, nil), "advantages", "float32")
	opd, n := termPositions(tr, recipes.BroadcastSearch)
	if !reflect.DeepEqual(opd, inAdv) || n != 2 {
		t.Errorf("search: term at %v (%d term tokens), the advantage route puts it at %v (want 2 tokens)", opd, n, inAdv)
	}
	tr.OPD = []float64{0.1, 0.2, 0, 0, 0.4}
	inAdv = tensor[float32](t, BuildDatum(tr, Terms{Sign: 1, OPDCoef: 1}, nil), "advantages", "float32")
	opd, n = termPositions(tr, recipes.BroadcastResponse)
	if !reflect.DeepEqual(opd, inAdv) || n != 3 {
		t.Errorf("response: term at %v (%d term tokens), the advantage route puts it at %v (want 3 tokens)", opd, n, inAdv)
	}
	tr.OPD = nil // no usable critique: zeros, its tokens still counted
	if opd, n = termPositions(tr, recipes.BroadcastSearch); n != 2 || !reflect.DeepEqual(opd, make([]float32, len(opd))) {
		t.Errorf("no term: %v, %d term tokens", opd, n)
	}
}
