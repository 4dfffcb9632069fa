package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
)

// writeEndpointsFile replaces path atomically with an llm-d endpoints
// file listing urls (http://127.0.0.1:port).
func writeEndpointsFile(t *testing.T, path string, urls ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for i, u := range urls {
		host, port, _ := strings.Cut(strings.TrimPrefix(u, "http://"), ":")
		fmt.Fprintf(&b, "  - name: policy-%d\n    address: %s\n    port: \"%s\"\n", i, host, port)
	}
	if err := os.WriteFile(path+".tmp", []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// A run whose replicas come from policy.endpoints_file follows the file:
// after step 2 the file lists another server instead, which is given the
// step's adapter before it serves, and every later request goes to it.
func TestRunFollowsEndpointsFile(t *testing.T) {
	r := testRecipe(t, "", "policy.urls=embedded,embedded", "train.steps=4", "eval.datasets.nq=")
	ctx := context.Background()
	deps, emb, err := setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	urls := emb.Sim().PolicyURLs
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	writeEndpointsFile(t, path, urls[0])
	r.Policy.EndpointsFile = path
	// The run starts with the file's one server; the second is the
	// simulator's too, built by NewPolicy when the file names it.
	deps.Policies = deps.Policies[:1]
	deps.NewPolicy = func(u string) (policy.Policy, error) {
		c, err := policy.New(transport.DefaultOptions("policy", u))
		if err == nil {
			t.Cleanup(c.Close)
		}
		return c, err
	}
	var out bytes.Buffer
	rn := &Runner{Recipe: r, Deps: deps, Out: &out, endpointsPoll: 10 * time.Millisecond}
	second := emb.Sim().Policies[1]
	var before int64
	rn.afterStep = func(step int) {
		if step != 2 {
			return
		}
		before = second.Stats().Requests
		writeEndpointsFile(t, path, urls[1])
		reps := rn.last.rollouts.Replicas
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if i := slices.Index(reps.URLs(), urls[1]); i >= 0 && reps.Len() == 2 && !reps.Down(1) && reps.Gone(0) {
				return
			}
		}
		t.Errorf("20 s after the file changed: replicas %v", reps.URLs())
	}
	sum, err := rn.Run(ctx)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if len(sum.Steps) != 4 {
		t.Fatalf("%d steps", len(sum.Steps))
	}
	if before != 0 {
		t.Errorf("the second server had %d requests before the file named it", before)
	}
	if got := second.Stats().Requests; got == 0 {
		t.Errorf("the second server served no request after the file named it")
	}
	// Steps 3 and 4 sampled from the second server alone, with their
	// adapters (the weight book admitted it with step 2's).
	for _, st := range sum.Steps[2:] {
		for u := range st.Replicas {
			if u != urls[1] {
				t.Errorf("step %d sampled on %s after it left the file (sampled by %v)", st.Step, u, st.Replicas)
			}
		}
	}
	// The recipe saved in the run directory loads again (orchestrate track
	// reads it): the file, not the servers it listed at the start.
	if saved, err := recipes.Load(filepath.Join(sum.Dir, "recipe.yaml"), nil, nil); err != nil {
		t.Errorf("the saved recipe: %v", err)
	} else if !slices.Equal(saved.Policy.URLs, []string{urls[1]}) {
		t.Errorf("the saved recipe's policy.urls %v, want the file's %s", saved.Policy.URLs, urls[1])
	}
	// The same batches as a run on a static list of both servers.
	static := testRecipe(t, "", "policy.urls=embedded,embedded", "train.steps=4", "eval.datasets.nq=")
	want, _ := runRecipe(t, static, 1)
	if got, w := stepDigests(sum), stepDigests(want); !slices.Equal(got, w) {
		t.Errorf("batch digests %v, a static list's %v", got, w)
	}
	for _, want := range []string{urls[1] + " added", urls[0] + " removed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the run did not say %q:\n%s", want, out.String())
		}
	}
}
