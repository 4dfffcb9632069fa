package trainer

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/sim/lm"
)

// TestTrainerDelay checks that forward_backward takes DatumDelay per datum
// and optim_step StepDelay on the worker, with the futures pending meanwhile.
func TestTrainerDelay(t *testing.T) {
	f := getFixture(t)
	const perDatum, step = 15 * time.Millisecond, 25 * time.Millisecond
	ts := NewServer(f.model, testBase, t.TempDir())
	ts.PollWait = 2 * time.Millisecond
	ts.DatumDelay, ts.StepDelay = perDatum, step
	t.Cleanup(ts.Close)
	srv := httptest.NewServer(ts.Handler())
	t.Cleanup(srv.Close)
	c := apiClient{T: t, Base: srv.URL}
	session := createSession(c)
	model := createModel(c, session, 1)
	// Two datums of one sampled turn each.
	var data []map[string]any
	for i := range 2 {
		prompt := f.tk.Encode(promptText(f.hotpot[i].Q, ""))
		g := f.model.Generate(lm.InitialParams(), prompt, trainSampling(), rand.New(rand.NewPCG(uint64(i), 1)))
		tr := trajectory{IDs: concat(prompt, g.IDs), Policy: make([]bool, len(prompt)), Logprobs: make([]float64, len(prompt))}
		for _, lp := range g.Logprobs {
			tr.Policy = append(tr.Policy, true)
			tr.Logprobs = append(tr.Logprobs, lp)
		}
		data = append(data, datum(tr, 1, 0))
	}
	t0 := time.Now()
	c.Call("/api/v1/forward_backward", fbBody(model, 1, "importance_sampling", nil, data...))
	if el := time.Since(t0); el < 2*perDatum {
		t.Errorf("forward_backward of 2 datums took %v, want at least %v", el, 2*perDatum)
	}
	t1 := time.Now()
	c.Call("/api/v1/optim_step", optimBody(model, 2, 0.1))
	if el := time.Since(t1); el < step {
		t.Errorf("optim_step took %v, want at least %v", el, step)
	}
	st := ts.Stats()
	if st.Jobs != 3 || st.Datums != 2 || st.BusySeconds < (2*perDatum+step).Seconds() {
		t.Errorf("trainer stats %+v", st)
	}

	// While the worker spends the delay, the future is pending: a trainer
	// whose steps take an hour answers SkyRL's 408, and Close still stops it.
	slow := NewServer(f.model, testBase, t.TempDir())
	slow.PollWait = time.Millisecond
	slow.StepDelay = time.Hour
	slowSrv := httptest.NewServer(slow.Handler())
	defer slowSrv.Close()
	defer slow.Close()
	sc := apiClient{T: t, Base: slowSrv.URL}
	sm := createModel(sc, createSession(sc), 1)
	code, acc := sc.Post("/api/v1/optim_step", optimBody(sm, 1, 0.1))
	if code != http.StatusOK {
		t.Fatalf("optim_step: %d %v", code, acc)
	}
	if code, res := sc.Post("/api/v1/retrieve_future", map[string]any{"request_id": acc["request_id"]}); code != http.StatusRequestTimeout {
		t.Errorf("future of a delayed step: %d %v, want 408", code, res)
	}
}
