package orchestrator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/orchestrator/setup"
)

// The embedded retriever in Search-R1's BM25 shape (documents without id)
// gives the agent the same text as in the dense shape: a run sends the
// trainer the same batches, keeps the same trajectories and evaluates the
// same, while the client sees no ids and makes them from the contents.
func TestRetrieverStyleBM25SendsTheSameBatches(t *testing.T) {
	type outcome struct {
		digests, evals string
		trajectories   []byte
		synthIDs       bool
	}
	run := func(style string) outcome {
		r := testRecipe(t, "", "sim.retriever_style="+style, "eval.datasets.nq=")
		ctx := context.Background()
		deps, emb, err := setup.Connect(ctx, r, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer emb.Close()
		hits, err := deps.Retriever.Retrieve(ctx, []string{"who composed the opera carmen", "capital of australia"}, 3)
		if err != nil {
			t.Fatalf("%s: %v", style, err)
		}
		var o outcome
		n := 0
		for _, hs := range hits {
			for _, h := range hs {
				if n == 0 {
					o.synthIDs = h.IDFromContents
				} else if h.IDFromContents != o.synthIDs {
					t.Fatalf("%s: mixed ids %v", style, hits)
				}
				n++
			}
		}
		if n == 0 {
			t.Fatalf("%s: no hits", style)
		}
		sum, err := (&Runner{Recipe: r, Deps: deps}).Run(ctx)
		if err != nil {
			t.Fatalf("%s: %v", style, err)
		}
		if len(sum.Evals) == 0 {
			t.Fatalf("%s: no evaluation", style)
		}
		o.digests = strings.Join(stepDigests(sum), ",")
		o.evals = evalsText(sum.Evals)
		o.trajectories, err = os.ReadFile(filepath.Join(r.Output.Dir, "trajectories", "step-0001.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	dense, bm := run("dense"), run("bm25")
	if dense.synthIDs || !bm.synthIDs {
		t.Fatalf("ids made from contents: dense %t, bm25 %t", dense.synthIDs, bm.synthIDs)
	}
	if bm.digests != dense.digests {
		t.Errorf("batches differ: bm25 %s, dense %s", bm.digests, dense.digests)
	}
	if bm.evals != dense.evals {
		t.Errorf("evaluations differ: bm25 %s, dense %s", bm.evals, dense.evals)
	}
	if string(bm.trajectories) != string(dense.trajectories) || len(dense.trajectories) == 0 {
		t.Errorf("kept trajectories differ")
	}
	if !strings.Contains(string(dense.trajectories), `"titles"`) {
		t.Errorf("no search in the kept trajectories: nothing compared")
	}
}
