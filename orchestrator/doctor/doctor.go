package doctor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/hindsearch/hindsearch/clients/judge"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/policy/sglang"
	"github.com/hindsearch/hindsearch/clients/policy/tinker"
	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/clients/router"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
	simtrainer "github.com/hindsearch/hindsearch/sim/trainer"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// CheckStatus is the outcome of one check.
type CheckStatus string

// The outcomes of a check. Only CheckFail fails a doctor run.
const (
	// CheckOK: the check passed.
	CheckOK CheckStatus = "ok"
	// CheckFail: the run would fail or train on wrong numbers.
	CheckFail CheckStatus = "FAIL"
	// CheckWarn: something doctor cannot verify from here and that must
	// hold for the run to work.
	CheckWarn CheckStatus = "warn"
	// CheckSkip: the check was not made (an earlier check of the same
	// server failed, or the recipe does not use it).
	CheckSkip CheckStatus = "skip"
)

// Check is the result of one check of one server (or of the sync
// directory).
type Check struct {
	// Role is "policy", "judge", "retriever", "trainer", "reference",
	// "teacher" (which servers score the hindsight teacher), "sync" or
	// "tracking".
	Role string
	// Server is the server's base URL, or the directory for sync checks.
	Server string
	// Name is the check, e.g. "health" or "chat template".
	Name string
	// Status is the outcome.
	Status CheckStatus
	// Detail says what was found.
	Detail string
	// Fix says what to do: the exact server flag, environment variable,
	// recipe key or command. Set for CheckFail and CheckWarn.
	Fix string
}

// HostedTinkerHost is the hosted Tinker service's host (the SDK's default
// base URL is https://tinker.thinkingmachines.dev/services/tinker-prod):
// it needs an API key.
const HostedTinkerHost = "tinker.thinkingmachines.dev"

// DefaultCheckTimeout bounds each check of Doctor and Preflight, retries
// included.
const DefaultCheckTimeout = 15 * time.Second

// Options configure Doctor.
type Options struct {
	// Environ is where the variables named by judge.api_key_env and
	// trainer.api_key_env are looked up ("KEY=value" form, as
	// os.Environ). Their values are never reported.
	Environ []string
	// CheckTimeout bounds each check (0: DefaultCheckTimeout).
	CheckTimeout time.Duration
}

// Report is the result of every check of a recipe's servers.
type Report struct {
	// Checks are in a fixed order: each policy replica in policy.urls
	// order, then the judge, the retriever, the trainer and the sync
	// directory.
	Checks []Check
	// Simulated names the roles served by the embedded simulator (from
	// Deps.Simulated); Write says so under the table.
	Simulated []string
}

// Failed returns the checks whose status is CheckFail.
func (d *Report) Failed() []Check {
	var out []Check
	for _, c := range d.Checks {
		if c.Status == CheckFail {
			out = append(out, c)
		}
	}
	return out
}

// Write prints the report to w: a table with one row per check (role,
// server, check, status, detail), then every failure and warning with its
// fix, then a one-line verdict.
func (d *Report) Write(w io.Writer) error {
	t := tablewriter.NewTable(w,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{Symbols: tw.NewSymbols(tw.StyleASCII)})),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithRowAutoFormat(tw.Off),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithRowAlignment(tw.AlignLeft),
	)
	t.Header("role", "server", "check", "status", "detail")
	for _, c := range d.Checks {
		if err := t.Append([]string{c.Role, c.Server, c.Name, string(c.Status), c.Detail}); err != nil {
			return fmt.Errorf("doctor table: %w", err)
		}
	}
	if err := t.Render(); err != nil {
		return fmt.Errorf("doctor table: %w", err)
	}
	var b strings.Builder
	if len(d.Simulated) > 0 {
		fmt.Fprintf(&b, "SIMULATED: %s served by the embedded hindsearch simulator, not by language models.\n", strings.Join(d.Simulated, ", "))
	}
	failed, warned := 0, 0
	for _, c := range d.Checks {
		if c.Status != CheckFail && c.Status != CheckWarn {
			continue
		}
		if c.Status == CheckFail {
			failed++
		} else {
			warned++
		}
		fmt.Fprintf(&b, "\n%s %s %s %s: %s\n", c.Status, c.Role, c.Server, c.Name, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(&b, "  fix: %s\n", c.Fix)
		}
	}
	switch {
	case failed > 0:
		fmt.Fprintf(&b, "\n%d of %d checks failed, %d warnings.\n", failed, len(d.Checks), warned)
	case warned > 0:
		fmt.Fprintf(&b, "\nno check failed; %d warnings.\n", warned)
	default:
		fmt.Fprintf(&b, "\nall %d checks passed.\n", len(d.Checks))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Run checks every server the recipe names and the sync directory, and
// does not stop at the first failure:
//
//   - each policy replica: GET /health; GET /v1/models lists policy.model
//     (and hindsight.teacher when it names another model); with sync.kind
//     lora, the runtime LoRA routes exist; with sync.kind sglang_disk,
//     POST /update_weights_from_disk exists; POST /tokenize with messages
//     applies a chat template; a one-token completion of the probe's ids
//     returns the sampled token id and its logprob, and scoring the probe
//     returns a prompt logprob per token; POST /tokenize of a probe string
//     gives the same ids on every replica and under the teacher model;
//     the local tokenizer (policy.tokenizer) gives each replica's ids on
//     probe texts (ASCII, accents, CJK, emoji, the agent tags, an
//     <information> block, the invalid-action text) and they spell the
//     texts under its bytes, and it builds the chat-templated prompt the
//     replica builds (a difference fails with policy.tokenize local and
//     warns otherwise);
//   - the judge (when hindsight is on): a probe chat completion answers,
//     and its api_key_env variable is set (a warning only when the server
//     accepted the probe without it);
//   - the retriever: POST /retrieve of two probe queries answers one
//     result list per query, each hit with an id, contents and a score;
//   - the trainer: GET healthz answers, get_server_capabilities lists
//     trainer.base_model, its api_key_env variable is set (a warning only
//     when the server accepted requests without it), trainer.lora_rank
//     suits sync.kind (weightsCheck), the Adam settings hold on the
//     backend (optimizerCheck), and, for a remote trainer,
//     trainer.checkpoints_dir is a readable directory (a warning when it
//     does not exist yet);
//   - sync.dir (unless sync.kind is none): a probe file can be created,
//     written, read back and removed (directories doctor had to create are
//     removed again); a policy replica that is not on a loopback host gets a
//     warning that the directory must be mounted there at the same path.
//
// Each check is bounded by opt.CheckTimeout; the servers are checked
// concurrently. r must have its run defaults applied (ApplyRunDefaults).
func Run(ctx context.Context, r *recipes.Recipe, deps roles.Deps, opt Options) *Report {
	c := newChecker(r, deps, opt.Environ, opt.CheckTimeout, true)
	return &Report{Checks: c.run(ctx), Simulated: slices.Clone(deps.Simulated)}
}

// checker runs the checks of Doctor (full) or the fast subset of
// Preflight: reachability, served models, the sync route, the retriever
// probe and the trainer's base model.
type checker struct {
	r       *recipes.Recipe
	deps    roles.Deps
	env     map[string]string
	timeout time.Duration
	full    bool
}

func newChecker(r *recipes.Recipe, deps roles.Deps, environ []string, timeout time.Duration, full bool) *checker {
	if timeout <= 0 {
		timeout = DefaultCheckTimeout
	}
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return &checker{r: r, deps: deps, env: env, timeout: timeout, full: full}
}

// run checks every server concurrently and returns the checks in a fixed
// order.
func (c *checker) run(ctx context.Context) []Check {
	reps := make([]replicaChecks, len(c.deps.Policies))
	var judgeC, retC, trainC, syncC []Check
	var wg sync.WaitGroup
	for i, p := range c.deps.Policies {
		if tc, ok := p.(*tinker.Client); ok {
			wg.Go(func() { reps[i] = c.tinkerPolicy(ctx, tc) })
			continue
		}
		wg.Go(func() { reps[i] = c.policy(ctx, p) })
	}
	if c.full && c.deps.Judge != nil {
		wg.Go(func() { judgeC = c.judge(ctx, c.deps.Judge) })
	}
	if c.deps.Retriever != nil {
		wg.Go(func() { retC = c.retriever(ctx, c.deps.Retriever) })
	}
	if c.deps.Trainer != nil {
		wg.Go(func() { trainC = c.trainer(ctx, c.deps.Trainer) })
	}
	refC := make([]Check, len(c.deps.References))
	if c.full {
		for i, p := range c.deps.References {
			wg.Go(func() { refC[i] = c.referenceCheck(ctx, p) })
		}
	}
	// sync.kind tinker moves no files: no sync.dir.
	if c.full && c.r.Sync.Kind != recipes.SyncNone && c.r.Sync.Kind != recipes.SyncTinker {
		wg.Go(func() { syncC = c.syncDir() })
	}
	var trackC, routerC []Check
	if c.full {
		wg.Go(func() { trackC = c.trackers(ctx) })
	}
	if c.deps.RouterAdmin != nil {
		wg.Go(func() { routerC = []Check{c.routerCheck(ctx, c.deps.RouterAdmin)} })
	}
	wg.Wait()
	var out []Check
	if c.full {
		tokenizerChecks(c.r, reps)
	}
	for _, rc := range reps {
		out = append(out, rc.checks...)
	}
	out = append(out, routerC...)
	out = append(out, judgeC...)
	out = append(out, retC...)
	out = append(out, trainC...)
	out = append(out, refC...)
	if c.full {
		out = append(out, teacherCheck(c.r)...)
	}
	out = append(out, syncC...)
	return append(out, trackC...)
}

// routerCheck is policy.router_url's "workers" row: the router's worker
// list against policy.urls. A worker it lists that policy.urls lacks
// fails where the run serves trained weights (requests routed there would
// lack them); servers it does not list yet are fine: the run adds those
// that hold the weights in use.
func (c *checker) routerCheck(ctx context.Context, rt router.Router) Check {
	ch := Check{Role: "router", Server: rt.URL(), Name: "workers"}
	cctx, cancel := c.bounded(ctx)
	listed, err := rt.Workers(cctx)
	cancel()
	if err != nil {
		ch.Status, ch.Detail = CheckFail, "GET /list_workers: "+err.Error()
		ch.Fix = "start the router (vllm-router) at policy.router_url, or unset policy.router_url to call policy.urls directly"
		return ch
	}
	var servers []string
	for _, p := range c.deps.Policies {
		servers = append(servers, p.URL())
	}
	foreign, missing := router.Compare(listed, servers)
	switch {
	case len(foreign) > 0 && c.r.Sync.Kind != recipes.SyncNone:
		ch.Status = CheckFail
		ch.Detail = fmt.Sprintf("routes to %s, not in policy.urls: requests for this run's trained weights sent there would fail", strings.Join(foreign, ", "))
		ch.Fix = "remove them from the router (POST /remove_worker?url=) or list them in policy.urls"
	case len(foreign) > 0:
		ch.Status = CheckWarn
		ch.Detail = fmt.Sprintf("routes to %s, not in policy.urls: they serve this run's requests (sync.kind none) but the run cannot check or drain them", strings.Join(foreign, ", "))
	case len(missing) > 0:
		ch.Status = CheckOK
		ch.Detail = fmt.Sprintf("lists %d of %d policy servers; the run adds %s once they hold the weights in use", len(listed)-len(foreign), len(c.deps.Policies), strings.Join(missing, ", "))
	default:
		ch.Status = CheckOK
		ch.Detail = fmt.Sprintf("routes to exactly policy.urls (%d servers)", len(listed))
	}
	return ch
}

// lossAggCheck is the trainer's "loss aggregation" row: the backend the
// run will scale the advantages for (TrainerBackend) and what that makes
// of trainer.loss_agg.
func (c *checker) lossAggCheck(ctx context.Context, u string) Check {
	ch := Check{Role: "trainer", Server: u, Name: "loss aggregation"}
	cctx, cancel := c.bounded(ctx)
	be, err := TrainerBackend(cctx, c.r, c.deps)
	cancel()
	if err != nil {
		ch.Status, ch.Detail = CheckFail, reason(err)
		ch.Fix = fmt.Sprintf("set trainer.backend to %s, %s or %s (the trainer's own loss aggregation)", recipes.BackendSkyRLJAX, recipes.BackendSkyRLFSDP, recipes.BackendHosted)
		return ch
	}
	how := "each datum's advantages scaled for it"
	if recipes.NativeAgg(c.r.Trainer.LossAgg, be) {
		how = "the backend's own, advantages sent as they are"
	}
	ch.Status, ch.Detail = CheckOK, fmt.Sprintf("%s on %s (trainer.backend %s): %s", c.r.Trainer.LossAgg, be, c.r.Trainer.Backend, how)
	return ch
}

// referenceCheck is a reference server's row (reference.urls): it scores
// a short sequence under policy.model, as trainer.kl_coef's prefill will.
func (c *checker) referenceCheck(ctx context.Context, p policy.Policy) Check {
	ch := Check{Role: "reference", Server: p.URL(), Name: "scores " + c.r.Policy.Model + referenceUses(c.r)}
	tok, err := c.deps.LocalTokenizer()
	if err != nil {
		ch.Status, ch.Detail = CheckSkip, "no local tokenizer to build the probe (see the local tokenizer row)"
		return ch
	}
	seq := tok.Vocab.AppendEncode(nil, tok.Chat([]policy.Message{{Role: "user", Content: tinkerProbe}}, true))
	cctx, cancel := c.bounded(ctx)
	lps, err := p.Score(cctx, c.r.Policy.Model, seq)
	cancel()
	switch {
	case err != nil:
		ch.Status, ch.Detail = CheckFail, reason(err)
		ch.Fix = "start a server of policy.model's initial weights at this URL (never synced), or leave reference.urls empty where the policy servers keep serving them (sync.kind lora)"
	case len(lps) != len(seq):
		ch.Status, ch.Detail = CheckFail, fmt.Sprintf("%d logprobs for %d tokens", len(lps), len(seq))
	default:
		ch.Status, ch.Detail = CheckOK, fmt.Sprintf("%d prompt logprobs", len(lps))
	}
	return ch
}

// referenceUses says what the reference servers score for: the KL
// reference (trainer.kl_coef), the hindsight teacher (hindsight.teacher
// initial) or both.
func referenceUses(r *recipes.Recipe) string {
	var uses []string
	if r.Trainer.KLCoef > 0 {
		uses = append(uses, "KL reference")
	}
	if r.TeacherOnReferences() {
		uses = append(uses, "hindsight teacher")
	}
	if len(uses) == 0 {
		return " (unused: trainer.kl_coef 0, hindsight.teacher not initial)"
	}
	return " (" + strings.Join(uses, ", ") + ")"
}

// teacherCheck is the row that names the servers scoring the hindsight
// teacher's hinted contexts, and under which model; nil when no teacher
// scores (hindsight off, or hindsight.loss none).
func teacherCheck(r *recipes.Recipe) []Check {
	h := r.Hindsight
	if !h.Enabled || h.Loss == recipes.HindsightLossNone {
		return nil
	}
	ch := Check{Role: "teacher", Name: "hinted contexts", Status: CheckOK}
	switch {
	case r.TeacherOnReferences():
		ch.Server = strings.Join(r.Reference.URLs, ", ")
		ch.Detail = fmt.Sprintf("hindsight.teacher %s: %s on the reference servers (reference.urls), the initial weights all run long", h.Teacher, r.Policy.Model)
	case h.Teacher == recipes.TeacherInitial && r.Sync.Kind == recipes.SyncTinker:
		ch.Server = r.Trainer.URL
		ch.Detail = fmt.Sprintf("hindsight.teacher %s: %s from base-model sampling sessions on the Tinker server", h.Teacher, r.Policy.Model)
	case h.Teacher == recipes.TeacherInitial:
		ch.Server = strings.Join(r.Policy.URLs, ", ")
		ch.Detail = fmt.Sprintf("hindsight.teacher %s: %s on the policy servers, which keep the base weights served beside the adapters (sync.kind %s)", h.Teacher, r.Policy.Model, r.Sync.Kind)
	case h.Teacher == recipes.TeacherSelf:
		ch.Server = strings.Join(r.Policy.URLs, ", ")
		ch.Detail = fmt.Sprintf("hindsight.teacher %s: each trajectory's own sampling weights on the policy servers", h.Teacher)
	default:
		ch.Server = strings.Join(r.Policy.URLs, ", ")
		ch.Detail = fmt.Sprintf("hindsight.teacher %s: that model on the policy servers", h.Teacher)
	}
	return []Check{ch}
}

// bounded returns ctx limited to one check's timeout.
func (c *checker) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// teacherModel is the model hindsight.teacher names when it is neither self
// nor initial and hindsight is on ("" otherwise): the policy servers must
// serve it too.
func teacherModel(r *recipes.Recipe) string {
	if t := r.Hindsight.Teacher; r.Hindsight.Enabled && t != recipes.TeacherSelf && t != recipes.TeacherInitial && t != r.Policy.Model {
		return t
	}
	return ""
}

// tokenizeProbe is tokenized by every replica under the policy and the
// teacher model: punctuation, digits, tags and non-ASCII text, where
// tokenizers differ first.
const tokenizeProbe = `Who composed "Carmen" (1875)? <search> Georges Bizet opera </search> naïve café, Zürich 東京 — 3.14`

// replicaChecks are one replica's checks, with what the tokenizer
// comparison across replicas needs.
type replicaChecks struct {
	url    string
	checks []Check
	// reached is false when the replica did not answer GET /health.
	reached bool
	// tinker marks a Tinker policy's rows (tinkerPolicy): no tokenizer
	// route to compare across replicas.
	tinker bool
	// unserved is set when GET /v1/models showed that policy.model is not
	// served: the tokenizer probes are skipped. teacherUnserved likewise
	// for the teacher model.
	unserved, teacherUnserved bool
	// ids is the probe under policy.model; idsErr its error.
	ids    []int
	idsErr error
	// teacherIDs is the probe under the teacher model (when there is
	// one); teacherErr its error.
	teacherIDs []int
	teacherErr error
	// local is the local tokenizer row (localTokenizerCheck), added after
	// the tokenizer row.
	local *Check
}

// unreached adds the rows names of a replica that did not answer its
// health check: each skipped with why, except the local tokenizer row when
// it is known to fail without the server.
func (c *checker) unreached(rc *replicaChecks, names []string, why string) {
	for _, n := range names {
		if n == localTokenizerRow {
			if ch, bad := c.missingLocalTokenizer(rc.url); bad {
				// Known without the server: say it now.
				rc.checks = append(rc.checks, ch)
				continue
			}
		}
		rc.checks = append(rc.checks, Check{Role: "policy", Server: rc.url, Name: n, Status: CheckSkip, Detail: why})
	}
}

// policy checks one replica.
func (c *checker) policy(ctx context.Context, p policy.Policy) replicaChecks {
	rc := replicaChecks{url: p.URL()}
	add := func(name string, st CheckStatus, detail, fix string) {
		rc.checks = append(rc.checks, Check{Role: "policy", Server: rc.url, Name: name, Status: st, Detail: detail, Fix: fix})
	}
	cctx, cancel := c.bounded(ctx)
	err := p.Health(cctx)
	cancel()
	if err != nil {
		fix := "start the vLLM (or SGLang) server at this address (see docs/gpu.md), or fix policy.urls"
		if c.sglang() {
			fix = "start SGLang (python -m sglang.launch_server --model-path MODEL ...) at this address (see docs/gpu.md), or fix policy.urls (policy.server is sglang)"
		}
		add("health", CheckFail, "GET /health: "+reason(err), fix)
		c.unreached(&rc, c.policyCheckNames(), "the server did not answer GET /health")
		return rc
	}
	rc.reached = true
	add("health", CheckOK, "GET /health answered 200", "")

	// Served models.
	want := []string{c.r.Policy.Model}
	if t := teacherModel(c.r); t != "" {
		want = append(want, t)
	}
	cctx, cancel = c.bounded(ctx)
	models, err := p.Models(cctx)
	cancel()
	switch {
	case err != nil && c.sglang():
		add("models", CheckFail, "GET /get_model_info, /v1/models: "+reason(err), "the server must answer GET /get_model_info and GET /v1/models (SGLang's HTTP server does; policy.server is sglang)")
	case err != nil:
		add("models", CheckFail, "GET /v1/models: "+reason(err), "the server must answer GET /v1/models (vLLM and SGLang's OpenAI servers do)")
	default:
		var missing []string
		for _, m := range want {
			if !slices.Contains(models, m) {
				missing = append(missing, m)
			}
		}
		rc.unserved = !slices.Contains(models, c.r.Policy.Model)
		rc.teacherUnserved = len(want) > 1 && !slices.Contains(models, want[1])
		// A renamed SGLang serves a path (a directory it loaded).
		renamed := c.sglang() && rc.unserved && len(models) > 0 && filepath.IsAbs(models[0])
		switch {
		case renamed && c.r.Sync.Kind == recipes.SyncSGLangDisk:
			// SGLang renames the model to the path it loaded, so the name
			// no longer says which model it is: this run's or another
			// run's weights (an ablation's earlier variant, a killed run).
			// The run reloads what it needs before it samples.
			rc.unserved = false
			whose := "another run's sync (outside this run's sync.dir)"
			if c.underSyncDir(models[0]) {
				whose = "this run's sync.dir"
			}
			add("models", CheckOK, fmt.Sprintf("serves weights loaded from %s, %s (SGLang renames the model after /update_weights_from_disk); the run reloads the weights its state names (--resume), or policy.model %s before step 1 (a fresh run)", models[0], whose, c.r.Policy.Model), "")
		case renamed:
			add("models", CheckFail,
				fmt.Sprintf("serves weights loaded from %s, not %q (SGLang renames the model after /update_weights_from_disk; sync.kind %s does not reload full weights)", models[0], c.r.Policy.Model, c.r.Sync.Kind),
				fmt.Sprintf("restart SGLang there, or load the base weights again: POST %s/update_weights_from_disk {\"model_path\": %q}", rc.url, c.r.Policy.Model))
		case len(missing) > 0:
			server := "vLLM"
			if c.sglang() {
				server = "SGLang"
			}
			add("models", CheckFail,
				fmt.Sprintf("does not serve model %q (it serves %s)", missing[0], listOrNone(models)),
				fmt.Sprintf("start %s with --served-model-name %s, or set policy.model (or hindsight.teacher) to a served name", server, missing[0]))
		default:
			add("models", CheckOK, "serves "+strings.Join(want, ", "), "")
		}
	}

	// The weight sync route.
	if ch, ok := c.syncRoute(ctx, p); ok {
		rc.checks = append(rc.checks, ch)
	}
	if c.sglang() {
		rc.checks = append(rc.checks, c.generateProbe(ctx, p))
	}
	if !c.full {
		return rc
	}
	if c.sglang() {
		rc.checks = append(rc.checks, c.deterministic(ctx, p))
	}

	// Tokenizer probe (compared across replicas later) and chat template.
	if rc.unserved {
		add("chat template", CheckSkip, fmt.Sprintf("the server does not serve %q", c.r.Policy.Model), "")
		add("logprobs", CheckSkip, fmt.Sprintf("the server does not serve %q", c.r.Policy.Model), "")
		add(prefillRow, CheckSkip, fmt.Sprintf("the server does not serve %q", c.r.Policy.Model), "")
		return rc
	}
	cctx, cancel = c.bounded(ctx)
	rc.ids, rc.idsErr = p.Tokenize(cctx, c.r.Policy.Model, tokenizeProbe, false)
	cancel()
	if t := teacherModel(c.r); t != "" && !rc.teacherUnserved {
		cctx, cancel = c.bounded(ctx)
		rc.teacherIDs, rc.teacherErr = p.Tokenize(cctx, t, tokenizeProbe, false)
		cancel()
	}
	if c.sglang() {
		// SGLang's /tokenize takes no messages; policy.tokenize is local
		// (validation requires it) and the local tokenizer row compares
		// the rest.
		add("chat template", CheckOK, "SGLang's /tokenize applies no chat template: the prompt is built locally (policy.tokenize local)", "")
		if rc.idsErr == nil {
			rc.checks = append(rc.checks, c.logprobs(ctx, p, rc.ids), c.logprobsMode(ctx, p, rc.ids))
		} else {
			add("logprobs", CheckSkip, "POST /tokenize of the probe failed", "")
			add("logprobs mode", CheckSkip, "POST /tokenize of the probe failed", "")
		}
		local := c.localTokenizerCheck(ctx, p, rc.idsErr)
		rc.local = &local
		rc.checks = append(rc.checks, c.prefillCheck(ctx, p))
		return rc
	}
	cctx, cancel = c.bounded(ctx)
	chat, err := p.TokenizeChat(cctx, c.r.Policy.Model, []policy.Message{{Role: "user", Content: tokenizeProbe}}, true)
	cancel()
	chatFix := "start vLLM with --chat-template FILE (the model's Jinja chat template; SGLang: --chat-template NAME): the agent prompt is built with the model's chat template"
	switch {
	case err != nil:
		add("chat template", CheckFail, "POST /tokenize with messages: "+reason(err), chatFix)
	case rc.idsErr != nil:
		add("chat template", CheckSkip, "POST /tokenize of the bare probe failed", "")
	case len(chat) <= len(rc.ids):
		add("chat template", CheckFail,
			fmt.Sprintf("the chat-templated probe has %d tokens, the bare probe %d: no template was applied", len(chat), len(rc.ids)), chatFix)
	default:
		add("chat template", CheckOK, fmt.Sprintf("applied: %d tokens with the template and generation prompt, %d bare", len(chat), len(rc.ids)), "")
	}
	if rc.idsErr == nil {
		rc.checks = append(rc.checks, c.logprobs(ctx, p, rc.ids))
	} else {
		add("logprobs", CheckSkip, "POST /tokenize of the probe failed", "")
	}
	local := c.localTokenizerCheck(ctx, p, rc.idsErr)
	rc.local = &local
	rc.checks = append(rc.checks, c.prefillCheck(ctx, p))
	// The tokenizer and local tokenizer rows are added by tokenizerChecks.
	return rc
}

// localTokenizerProbes are the texts the local tokenizer and each replica's
// POST /tokenize must tokenize alike: where tokenizers differ first, and
// the texts the program tokenizes.
var localTokenizerProbes = []struct{ name, text string }{
	{"ASCII", `Who composed "Carmen" (1875)? It's 3.14 -- isn't it?  Yes.`},
	{"accents", "naïve café, Zürich, São Paulo, Ærøskøbing, Ελληνικά, Ñandú"},
	{"CJK", "東京は日本の首都です。北京，서울"},
	{"emoji", "👍🏽 🇫🇷 🤖🎉"},
	{"agent tags", "<think> x </think>\n<search> Georges Bizet opera </search>\n\n<answer> Paris </answer>"},
	{"information block", format.InfoBlock([]string{"\"Carmen\"\nCarmen is an opera by Georges Bizet.", "\"Bizet\"\nGeorges Bizet (1838–1875)."})},
	{"invalid-action text", format.InvalidActionText},
}

// localTokenizerCheck compares the local tokenizer (policy.tokenizer) with
// replica p's POST /tokenize on localTokenizerProbes: the local encoding
// must give the server's ids, and the server's ids must spell the probe
// under the local tokenizer's bytes (what locates the search span and the
// per-token text); the chat-templated prompt must match too, which fails
// with policy.tokenize local (the prompt is built locally) and warns
// otherwise. bareErr is the replica's answer to the bare tokenizer probe.
func (c *checker) localTokenizerCheck(ctx context.Context, p policy.Policy, bareErr error) Check {
	if ch, bad := c.missingLocalTokenizer(p.URL()); bad {
		return ch
	}
	ch := Check{Role: "policy", Server: p.URL(), Name: localTokenizerRow}
	tok, _ := c.deps.LocalTokenizer()
	fix := localTokenizerFix
	switch {
	case bareErr != nil:
		ch.Status, ch.Detail = CheckSkip, "POST /tokenize of the probe failed"
		return ch
	}
	for _, pr := range localTokenizerProbes {
		cctx, cancel := c.bounded(ctx)
		server, err := p.Tokenize(cctx, c.r.Policy.Model, pr.text, false)
		cancel()
		if err != nil {
			ch.Status, ch.Detail = CheckFail, fmt.Sprintf("POST /tokenize of the %s probe: %s", pr.name, reason(err))
			ch.Fix = "the server must answer POST /tokenize {model, prompt, add_special_tokens} (vLLM's OpenAI server does)"
			return ch
		}
		if d := tokenizerDiff(tok, pr.text, server); d != "" {
			ch.Status, ch.Fix = CheckFail, fix
			ch.Detail = fmt.Sprintf("the %s probe %q: %s (local tokenizer: %s)", pr.name, clip(pr.text, 40), d, tok.Source)
			return ch
		}
	}
	if c.sglang() {
		ch.Status = CheckOK
		ch.Detail = fmt.Sprintf("%d probe texts tokenize alike under %s (SGLang's /tokenize has no chat template to compare: the prompt gets %s)", len(localTokenizerProbes), tok.Source, chatTemplateName(tok))
		return ch
	}
	msgs := []policy.Message{{Role: "user", Content: format.UserPrompt("who composed carmen", "")}}
	cctx, cancel := c.bounded(ctx)
	server, err := p.TokenizeChat(cctx, c.r.Policy.Model, msgs, true)
	cancel()
	local := c.r.Policy.Tokenize == recipes.TokenizeLocal
	var chatDiff string
	switch {
	case err != nil:
		chatDiff = "POST /tokenize with messages: " + reason(err)
	default:
		chatDiff = idsDiff(tok.Vocab.AppendEncode(nil, tok.Chat(msgs, true)), server)
	}
	n := len(localTokenizerProbes)
	switch {
	case chatDiff != "" && local:
		ch.Status, ch.Detail = CheckFail, "the chat-templated Search-R1 prompt: "+chatDiff+" (policy.tokenize local builds it with "+chatTemplateName(tok)+")"
		ch.Fix = "set policy.tokenize: server (the server applies the model's own chat template), or serve a model whose template is " + chatTemplateName(tok)
	case chatDiff != "":
		ch.Status = CheckWarn
		ch.Detail = fmt.Sprintf("%d probes tokenize alike under %s, but the chat-templated prompt differs: %s; unused with policy.tokenize server", n, tok.Source, chatDiff)
		ch.Fix = "keep policy.tokenize: server with this model (policy.tokenize local would build other prompts than the server)"
	default:
		ch.Status = CheckOK
		ch.Detail = fmt.Sprintf("%d probe texts and the chat-templated prompt tokenize alike under %s", n, tok.Source)
	}
	return ch
}

// localTokenizerRow names the local tokenizer check.
const localTokenizerRow = "local tokenizer"

// localTokenizerFix is the fix of a local tokenizer that is missing or
// differs from a server's.
const localTokenizerFix = "set policy.tokenizer to the tokenizer.json of the model this server serves (the snapshot vLLM loaded: its --tokenizer and --tokenizer-revision, or --model and --revision; see docs/gpu.md): the search span and the per-token text are located by the sampled ids' bytes under it"

// missingLocalTokenizer is the failed local tokenizer row of server when
// there is no local tokenizer (bad is false when there is one).
func (c *checker) missingLocalTokenizer(server string) (ch Check, bad bool) {
	_, err := c.deps.LocalTokenizer()
	if err == nil {
		return Check{}, false
	}
	ch = Check{Role: "policy", Server: server, Name: localTokenizerRow, Status: CheckFail, Detail: err.Error(), Fix: localTokenizerFix}
	var te *roles.TokenizerError
	if errors.As(err, &te) {
		ch.Detail, ch.Fix = te.What, te.Fix
	}
	return ch, true
}

// tokenizerDiff says how the local tokenizer's view of text differs from
// the server's ids ("" when it does not): the local encoding must be the
// server's ids, and the server's ids must spell text under the local
// tokenizer's bytes.
func tokenizerDiff(tok *roles.Tokenizer, text string, server []int) string {
	if d := idsDiff(tok.Vocab.AppendEncode(nil, text), server); d != "" {
		return d
	}
	got := roles.TurnBytes(tok.Vocab, server, nil)
	if string(got) == text {
		return ""
	}
	i := 0
	for i < len(got) && i < len(text) && got[i] == text[i] {
		i++
	}
	return fmt.Sprintf("the server's ids spell %q under the local tokenizer, not the probe: first difference at byte %d", clip(string(got), 40), i)
}

// idsDiff describes how the local ids differ from the server's ("" when
// they do not).
func idsDiff(local, server []int) string {
	for i := range min(len(local), len(server)) {
		if local[i] != server[i] {
			return fmt.Sprintf("the local tokenizer gives %d tokens, the server %d; first difference at token %d: %d (local) vs %d (server)", len(local), len(server), i, local[i], server[i])
		}
	}
	if len(local) != len(server) {
		return fmt.Sprintf("the local tokenizer gives %d tokens, the server %d; first difference at token %d", len(local), len(server), min(len(local), len(server)))
	}
	return ""
}

// chatTemplateName names the local tokenizer's chat template.
func chatTemplateName(tok *roles.Tokenizer) string {
	if tok.Source == roles.SimTokenizerSource {
		return "the simulator's chat template"
	}
	return "Qwen2.5's chat template"
}

// clip shortens s to at most n runes for a detail line.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// logprobs samples one token after the probe's ids and scores the probe
// (prompt logprobs), as rollouts and the teacher do: the answers must carry
// the sampled token id and its logprob, and a logprob for every prompt
// token.
func (c *checker) logprobs(ctx context.Context, p policy.Policy, ids []int) Check {
	ch := Check{Role: "policy", Server: p.URL(), Name: "logprobs"}
	fix := "the server must answer POST /v1/completions with a token-id prompt, return_tokens_as_token_ids and logprobs, and prompt_logprobs (vLLM's OpenAI server does; for SGLang set policy.server: sglang)"
	route, scoring := "POST /v1/completions", "prompt_logprobs"
	if c.sglang() {
		fix = "the server must answer POST /generate with input_ids, return_logprob and logprob_start_len (meta_info.output_token_logprobs and input_token_logprobs, with output_ids): SGLang's HTTP server does (check against your version)"
		route, scoring = "POST /generate", "input_token_logprobs"
	}
	if len(ids) < 2 {
		ch.Status, ch.Detail = CheckSkip, fmt.Sprintf("the probe has %d tokens", len(ids))
		return ch
	}
	seed := int64(1)
	cctx, cancel := c.bounded(ctx)
	comp, err := p.Complete(cctx, policy.CompletionRequest{Model: c.r.Policy.Model, Prompt: ids, MaxTokens: 1,
		Sampling: policy.Neutral(), Seed: &seed})
	cancel()
	switch {
	case err != nil:
		ch.Status, ch.Detail, ch.Fix = CheckFail, route+": "+reason(err), fix
		return ch
	case len(comp.TokenIDs) != 1 || len(comp.Logprobs) != 1 || !(comp.Logprobs[0] <= 0):
		ch.Status, ch.Detail, ch.Fix = CheckFail, fmt.Sprintf("%s with one new token returned %d tokens and logprobs %v", route, len(comp.TokenIDs), comp.Logprobs), fix
		return ch
	}
	cctx, cancel = c.bounded(ctx)
	lps, err := p.Score(cctx, c.r.Policy.Model, ids)
	cancel()
	if err != nil {
		ch.Status, ch.Detail, ch.Fix = CheckFail, scoring+": "+reason(err), fix
		return ch
	}
	for i, lp := range lps[1:] {
		if !(lp <= 0) {
			ch.Status, ch.Detail, ch.Fix = CheckFail, fmt.Sprintf("prompt logprob %v at position %d", lp, i+1), fix
			return ch
		}
	}
	ch.Status = CheckOK
	ch.Detail = fmt.Sprintf("sampled token %d (logprob %.3f); prompt logprobs for all %d probe tokens", comp.TokenIDs[0], comp.Logprobs[0], len(ids))
	return ch
}

// policyCheckNames are the checks after health, in order, for the rows a
// replica that is down skips.
func (c *checker) policyCheckNames() []string {
	names := []string{"models"}
	switch c.r.Sync.Kind {
	case recipes.SyncLoRA:
		names = append(names, "lora routes")
	case recipes.SyncSGLangDisk:
		names = append(names, "weights route")
	}
	if c.sglang() {
		names = append(names, "generate")
	}
	if c.full {
		if c.sglang() {
			names = append(names, "deterministic")
		}
		names = append(names, "chat template", "logprobs")
		if c.sglang() {
			names = append(names, "logprobs mode")
		}
		names = append(names, prefillRow)
		names = append(names, "tokenizer", localTokenizerRow)
	}
	return names
}

// syncRoute probes the route sync.kind needs on replica p; ok is false when
// the kind needs none.
func (c *checker) syncRoute(ctx context.Context, p policy.Policy) (Check, bool) {
	ch := Check{Role: "policy", Server: p.URL()}
	cctx, cancel := c.bounded(ctx)
	defer cancel()
	// A probe that fails for another reason than a missing route fails
	// doctor; preflight leaves it to the run (its retries, the replica's
	// health tracking) and only warns.
	other := CheckFail
	if !c.full {
		other = CheckWarn
	}
	switch c.r.Sync.Kind {
	case recipes.SyncLoRA:
		// Unloading an adapter that is not there is refused by a server
		// with the routes (404 with vLLM's error object, 400 in some
		// versions) and answered "Not Found" by one without them.
		ch.Name = "lora routes"
		err := p.UnloadLoRA(cctx, "hindsearch-doctor-probe")
		switch {
		case c.sglang():
			return c.sglangLoRARoute(ch, err, other), true
		case err == nil || transport.IsStatus(err, http.StatusBadRequest, http.StatusNotFound) && !errors.Is(err, policy.ErrLoRADisabled):
			ch.Status, ch.Detail = CheckOK, "POST /v1/unload_lora_adapter exists (runtime LoRA loading is on)"
		case errors.Is(err, policy.ErrLoRADisabled):
			ch.Status, ch.Detail = CheckFail, "POST /v1/unload_lora_adapter is not served: runtime LoRA loading is off"
			ch.Fix = fmt.Sprintf("start vLLM with --enable-lora --max-lora-rank %d (at least trainer.lora_rank) and the environment variable VLLM_ALLOW_RUNTIME_LORA_UPDATING=True", loraRankFlag(c.r.Trainer.LoRARank))
		default:
			ch.Status, ch.Detail = other, "POST /v1/unload_lora_adapter probe: "+reason(err)
			ch.Fix = "check the server's log; runtime LoRA loading needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
		}
		return ch, true
	case recipes.SyncSGLangDisk:
		// Loading weights from a path that does not exist is refused with
		// 400 by SGLang, and the route is missing (404) on vLLM.
		ch.Name = "weights route"
		err := p.UpdateWeightsFromDisk(cctx, probeMissingPath)
		var se *transport.StatusError
		switch {
		case errors.Is(err, policy.ErrWeightsFromDiskUnsupported):
			ch.Status, ch.Detail = CheckFail, "POST /update_weights_from_disk is not served"
			ch.Fix = "sync.kind sglang_disk needs SGLang: python -m sglang.launch_server --model-path MODEL (see docs/gpu.md); stock vLLM has no full-weight reload route (use sync.kind lora there)"
		case err != nil && (errors.As(err, &se) || isConnError(err)):
			ch.Status, ch.Detail = other, "POST /update_weights_from_disk probe: "+reason(err)
			ch.Fix = "check the SGLang server's log"
		case err == nil:
			ch.Status, ch.Detail = CheckOK, "POST /update_weights_from_disk exists (it answered success for a missing path)"
		default:
			// A refusal (SGLang's 400 {"success": false}) is the answer of
			// a server that has the route.
			ch.Status, ch.Detail = CheckOK, "POST /update_weights_from_disk exists (it refused a missing path)"
		}
		return ch, true
	}
	return ch, false
}

// sglang reports whether the policy servers are SGLang's native API.
func (c *checker) sglang() bool { return c.r.Policy.Server == recipes.ServerSGLang }

// sglangLoRARoute reads SGLang's answer to unloading an adapter that is not
// loaded: a refusal (400) from a server with LoRA on, the route missing or
// a refusal naming --enable-lora from one without.
func (c *checker) sglangLoRARoute(ch Check, err error, other CheckStatus) Check {
	switch {
	case errors.Is(err, sglang.ErrLoRADisabled):
		ch.Status, ch.Detail = CheckFail, "SGLang's LoRA routes are off: "+reason(err)
		ch.Fix = fmt.Sprintf("start SGLang with --enable-lora --max-lora-rank %d --lora-target-modules all --max-loras-per-batch N (N at least the adapters served at once; --lora-paths NAME=PATH preloads one; check against your version)", c.r.Trainer.LoRARank)
	case err == nil || transport.IsStatus(err, http.StatusBadRequest):
		ch.Status, ch.Detail = CheckOK, "POST /unload_lora_adapter exists (LoRA is on)"
	default:
		ch.Status, ch.Detail = other, "POST /unload_lora_adapter probe: "+reason(err)
		ch.Fix = "check the SGLang server's log; runtime LoRA loading needs --enable-lora"
	}
	return ch
}

// logprobsMode finds which logprobs SGLang reports (its sampler reports
// log_softmax(logits / T), after penalties, unless the environment
// variable that returns the original logprobs is set): it samples a few
// tokens after the probe at temperature 0.5 and scores them at
// temperature 1 (greedy scoring runs at temperature 1). Equal logprobs are
// raw, as vLLM reports them; different ones are the temperature-scaled
// distribution's, which coincide with raw ones only at train.temperature
// 1. Only positions whose scored logprob is at least minModeLogprob away
// from 0 are compared: for a near-certain token both modes give about 0.
// sampleThenScore samples req on p and, when it returned tokens with their
// logprobs, scores req.Prompt followed by them through the prefill route:
// the probes that compare the two routes' logprobs of the same tokens.
// err is the sampling call's failure, scoreErr the scoring's (a failed
// call, or not one logprob per token); lps is nil unless both succeeded.
func (c *checker) sampleThenScore(ctx context.Context, p policy.Policy, req policy.CompletionRequest) (comp *policy.Completion, lps []float64, scoreErr, err error) {
	cctx, cancel := c.bounded(ctx)
	comp, err = p.Complete(cctx, req)
	cancel()
	if err != nil || len(comp.TokenIDs) == 0 || len(comp.TokenIDs) != len(comp.Logprobs) {
		return comp, nil, nil, err
	}
	seq := append(slices.Clone(req.Prompt), comp.TokenIDs...)
	cctx, cancel = c.bounded(ctx)
	lps, scoreErr = p.Score(cctx, req.Model, seq)
	cancel()
	if scoreErr == nil && len(lps) != len(seq) {
		lps, scoreErr = nil, fmt.Errorf("%d logprobs for %d tokens", len(lps), len(seq))
	}
	return comp, lps, scoreErr, nil
}

func (c *checker) logprobsMode(ctx context.Context, p policy.Policy, ids []int) Check {
	ch := Check{Role: "policy", Server: p.URL(), Name: "logprobs mode"}
	if len(ids) < 2 {
		ch.Status, ch.Detail = CheckSkip, fmt.Sprintf("the probe has %d tokens", len(ids))
		return ch
	}
	const probeTemp, probeTokens = 0.5, 8
	seed := int64(1)
	s := policy.Neutral()
	s.Temperature = probeTemp
	comp, lps, scoreErr, err := c.sampleThenScore(ctx, p, policy.CompletionRequest{Model: c.r.Policy.Model, Prompt: ids, MaxTokens: probeTokens, Sampling: s, Seed: &seed})
	switch {
	case err != nil:
		ch.Status, ch.Detail = CheckSkip, "POST /generate at temperature 0.5: "+reason(err)
		return ch
	case len(comp.TokenIDs) == 0 || len(comp.TokenIDs) != len(comp.Logprobs):
		ch.Status, ch.Detail = CheckSkip, "the temperature 0.5 probe returned no token"
		return ch
	case scoreErr != nil:
		ch.Status, ch.Detail = CheckSkip, "scoring the sampled tokens: "+reason(scoreErr)
		return ch
	}
	used, differ := 0, 0
	var detail string
	for k, id := range comp.TokenIDs {
		at05, at1 := comp.Logprobs[k], lps[len(ids)+k]
		if math.Abs(at1) < minModeLogprob {
			continue
		}
		used++
		d := math.Abs(at05-at1) > 1e-3+1e-3*math.Abs(at1)
		if d {
			differ++
		}
		if detail == "" || d && differ == 1 {
			detail = fmt.Sprintf("token %d: logprob %.4f sampled at temperature %.1f, %.4f at temperature 1", id, at05, probeTemp, at1)
		}
	}
	if used == 0 {
		ch.Status = CheckSkip
		ch.Detail = fmt.Sprintf("all %d tokens sampled at temperature %.1f are near-certain (|logprob| below %g at temperature 1), where raw and temperature-scaled logprobs agree: the mode cannot be told", len(comp.TokenIDs), probeTemp, minModeLogprob)
		return ch
	}
	detail = fmt.Sprintf("%s (%d of %d sampled positions compared)", detail, used, len(comp.TokenIDs))
	if differ == 0 {
		ch.Status, ch.Detail = CheckOK, detail+": raw logprobs, as vLLM reports them ("+originalLogprobVars+" is on)"
		return ch
	}
	ch.Detail = detail + ": processed logprobs (after temperature scaling, SGLang's default)"
	if c.r.Train.Temperature == 1 {
		ch.Status, ch.Detail = CheckOK, ch.Detail+"; at train.temperature 1 they are the raw ones"
		return ch
	}
	ch.Status = CheckWarn
	ch.Fix = fmt.Sprintf("at train.temperature %g SGLang reports the temperature-scaled distribution's logprobs, vLLM the raw model's: start SGLang with the environment variable %s for the logprobs before the temperature (still after repetition, presence and frequency penalties, unlike vLLM's raw logprobs; check against your version)", c.r.Train.Temperature, originalLogprobVarsFix)
	return ch
}

// minModeLogprob is the smallest |logprob| at temperature 1 at which
// logprobsMode compares a sampled token: nearer 0, the temperature-scaled
// logprob of a near-certain token is as near, and the modes look alike.
const minModeLogprob = 0.05

// originalLogprobVars names SGLang's variable for the original logprobs.
const originalLogprobVars = "SGLANG_RETURN_ORIGINAL_LOGPROB or RETURN_ORIGINAL_LOGPROB"

// originalLogprobVarsFix names it by version (layers/sampler.py, per the
// source audit of 2026-12: added 2025-08-29, renamed 2025-10-15).
const originalLogprobVarsFix = "SGLANG_RETURN_ORIGINAL_LOGPROB=True (after 0.5.3.x; RETURN_ORIGINAL_LOGPROB=True in 0.5.2 to 0.5.3.x; none before)"

// generateProbe sends POST /generate with exactly the fields a rollout
// turn sends (the recipe's sampling settings, a seed, the stop strings;
// one new token): SGLang before 0.5.3 has no sampling_seed and answers
// every seeded request with a bare 500, which it names with the version
// /get_server_info reports.
func (c *checker) generateProbe(ctx context.Context, p policy.Policy) Check {
	ch := Check{Role: "policy", Server: p.URL(), Name: "generate"}
	seed := roles.Seed(c.r.Seed, 0)
	cctx, cancel := c.bounded(ctx)
	comp, err := p.Complete(cctx, policy.CompletionRequest{Model: c.r.Policy.Model, Prompt: generateProbeIDs, MaxTokens: 1,
		Sampling: roles.TrainSampling(c.r), Seed: &seed, Stop: format.StopStrings})
	cancel()
	if err == nil && len(comp.TokenIDs) == 1 && len(comp.Logprobs) == 1 {
		ch.Status, ch.Detail = CheckOK, "POST /generate with a rollout's fields (sampling_seed included) sampled a token"
		return ch
	}
	ch.Status = CheckFail
	ch.Detail = "POST /generate with a rollout's fields (the recipe's sampling, sampling_seed, the stop strings): " + reason(err)
	if err == nil {
		ch.Detail = fmt.Sprintf("POST /generate with one new token returned %d tokens and %d logprobs", len(comp.TokenIDs), len(comp.Logprobs))
	}
	ch.Fix = "check the SGLang server's log; rollouts send these fields on every turn"
	si, ok := p.(interface {
		ServerInfo(context.Context) (sglang.ServerInfo, error)
	})
	if !ok {
		return ch
	}
	cctx, cancel = c.bounded(ctx)
	info, ierr := si.ServerInfo(cctx)
	cancel()
	if ierr != nil {
		return ch
	}
	if v, ok := sglang.ParseVersion(info.Version); ok && v.Before(sglang.MinSamplingSeed) {
		ch.Detail += fmt.Sprintf(" (GET /get_server_info: version %s)", info.Version)
		ch.Fix = fmt.Sprintf("upgrade SGLang to 0.5.3 or later (this server is %s): sampling_params.sampling_seed, which every rollout sends, was added in 0.5.3, and older versions answer it with a plain 500", info.Version)
	} else if info.Version != "" {
		ch.Detail += fmt.Sprintf(" (GET /get_server_info: version %s)", info.Version)
	}
	return ch
}

// generateProbeIDs is generateProbe's prompt: a few small token ids,
// valid in any vocabulary.
var generateProbeIDs = []int{9707, 11, 1879, 0}

// deterministic reads server_args.enable_deterministic_inference: without
// it SGLang ignores sampling_seed (sampling/sampling_batch_info.py builds
// the seed tensor only with the flag), so samples are not reproducible and
// a resumed step draws other samples.
func (c *checker) deterministic(ctx context.Context, p policy.Policy) Check {
	ch := Check{Role: "policy", Server: p.URL(), Name: "deterministic"}
	si, ok := p.(interface {
		ServerInfo(context.Context) (sglang.ServerInfo, error)
	})
	if !ok {
		ch.Status, ch.Detail = CheckSkip, "the client reads no /get_server_info"
		return ch
	}
	cctx, cancel := c.bounded(ctx)
	info, err := si.ServerInfo(cctx)
	cancel()
	switch {
	case err != nil:
		ch.Status, ch.Detail = CheckSkip, "GET /get_server_info: "+reason(err)
	case info.DeterministicInference == nil:
		ch.Status, ch.Detail = CheckSkip, "GET /get_server_info has no enable_deterministic_inference (a version without the flag)"
	case *info.DeterministicInference:
		ch.Status, ch.Detail = CheckOK, "enable_deterministic_inference is on: sampling_seed makes each sample reproducible"
	default:
		ch.Status = CheckWarn
		ch.Detail = "enable_deterministic_inference is off: SGLang ignores sampling_seed, so samples are not reproducible and a resumed step draws other samples than the run it resumes"
		ch.Fix = "start SGLang with --enable-deterministic-inference (it also forces the pytorch sampling backend and batch-invariant kernels: slower decoding; check against your version)"
	}
	return ch
}

// underSyncDir reports whether path lies under sync.dir: weights a run of
// this program unpacked there and loaded.
func (c *checker) underSyncDir(path string) bool {
	dir, err := filepath.Abs(c.r.Sync.Dir)
	if err != nil || c.r.Sync.Dir == "" || !filepath.IsAbs(path) {
		return false
	}
	rel, err := filepath.Rel(dir, filepath.Clean(path))
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// probeMissingPath is a model path that does not exist, for the weights
// route probe.
const probeMissingPath = "/nonexistent/hindsearch-doctor-probe"

// loraRankFlag is the --max-lora-rank value vLLM accepts for a trained
// rank: the smallest of vLLM's allowed values at least rank.
func loraRankFlag(rank int) int {
	for _, v := range []int{8, 16, 32, 64, 128, 256, 320, 512} {
		if v >= rank {
			return v
		}
	}
	return rank
}

// tokenizerChecks adds each replica's tokenizer row: the probe tokenized
// under policy.model must give the same ids on every replica (ids sampled
// on one are scored on another) and under the teacher model.
func tokenizerChecks(r *recipes.Recipe, reps []replicaChecks) {
	ref := -1
	for i, rc := range reps {
		if rc.reached && !rc.unserved && rc.idsErr == nil && !rc.tinker {
			ref = i
			break
		}
	}
	teacher := teacherModel(r)
	for i := range reps {
		rc := &reps[i]
		if !rc.reached || rc.tinker {
			continue // its rows are skipped already, or its own
		}
		ch := Check{Role: "policy", Server: rc.url, Name: "tokenizer"}
		teacher := teacher
		if rc.teacherUnserved {
			teacher = "" // its row says it is not served
		}
		if rc.unserved {
			rc.local = &Check{Role: "policy", Server: rc.url, Name: localTokenizerRow, Status: CheckSkip,
				Detail: fmt.Sprintf("the server does not serve %q", r.Policy.Model)}
		}
		switch {
		case rc.unserved:
			ch.Status, ch.Detail = CheckSkip, fmt.Sprintf("the server does not serve %q", r.Policy.Model)
		case rc.idsErr != nil:
			ch.Status, ch.Detail = CheckFail, "POST /tokenize: "+reason(rc.idsErr)
			ch.Fix = "the server must answer POST /tokenize {model, prompt, add_special_tokens} (vLLM's OpenAI server does)"
		case teacher != "" && rc.teacherErr != nil:
			ch.Status, ch.Detail = CheckFail, fmt.Sprintf("POST /tokenize with the teacher model %q: %s", teacher, reason(rc.teacherErr))
			ch.Fix = fmt.Sprintf("serve %q on every replica (--served-model-name) or change hindsight.teacher", teacher)
		case teacher != "" && !slices.Equal(rc.ids, rc.teacherIDs):
			ch.Status, ch.Detail = CheckFail, fmt.Sprintf("%q and the teacher %q tokenize the probe differently (%s)", r.Policy.Model, teacher, tokenDiff(rc.ids, rc.teacherIDs))
			ch.Fix = "the teacher must use the policy's tokenizer (it scores the student's token ids): pick a teacher of the same model family, or hindsight.teacher self/initial"
		case i != ref && !slices.Equal(rc.ids, reps[ref].ids):
			ch.Status, ch.Detail = CheckFail, fmt.Sprintf("tokenizes the probe differently from %s (%s)", reps[ref].url, tokenDiff(reps[ref].ids, rc.ids))
			ch.Fix = "serve the same model and tokenizer revision on every replica (same --model, --tokenizer, --revision, --tokenizer-revision): token ids sampled on one replica are scored on another"
		default:
			ch.Status = CheckOK
			switch {
			case len(reps) == 1:
				ch.Detail = fmt.Sprintf("%d tokens (one replica)", len(rc.ids))
			case i == ref:
				ch.Detail = fmt.Sprintf("%d tokens (the reference)", len(rc.ids))
			default:
				ch.Detail = fmt.Sprintf("%d tokens, identical to %s", len(rc.ids), reps[ref].url)
			}
			if teacher != "" {
				ch.Detail += fmt.Sprintf("; identical under the teacher %q", teacher)
			}
		}
		rc.checks = append(rc.checks, ch)
		if rc.local != nil {
			rc.checks = append(rc.checks, *rc.local)
		}
	}
}

// tokenDiff describes how two token id lists differ.
func tokenDiff(a, b []int) string {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return fmt.Sprintf("%d vs %d tokens, first difference at token %d: %d vs %d", len(a), len(b), i, a[i], b[i])
		}
	}
	return fmt.Sprintf("%d vs %d tokens", len(a), len(b))
}

// keyState is what a server made of a request: refused its credentials
// (401 or 403), accepted it, or neither (it was not reached, or failed
// otherwise).
type keyState int

const (
	keyUnknown keyState = iota
	keyAccepted
	keyRefused
)

// keyStateOf classifies a probe's error.
func keyStateOf(err error) keyState {
	switch {
	case err == nil:
		return keyAccepted
	case transport.IsStatus(err, http.StatusUnauthorized, http.StatusForbidden):
		return keyRefused
	}
	return keyUnknown
}

// apiKey reports the variable recipe key `key` names, given what the server
// made of a probe sent with (or without) it; ok is false when none is
// named. The value is never reported. An unset variable fails only when
// the server refused the keyless probe: servers without authentication
// (SkyRL tx, a vLLM started without --api-key) need none.
func (c *checker) apiKey(role, server, key, name string, st keyState) (Check, bool) {
	if name == "" {
		return Check{}, false
	}
	ch := Check{Role: role, Server: server, Name: "api key"}
	switch {
	case c.env[name] != "":
		ch.Status, ch.Detail = CheckOK, name+" is set (value not shown)"
	case strings.Contains(server, HostedTinkerHost):
		ch.Status, ch.Detail = CheckFail, fmt.Sprintf("%s (named by %s) is not set, and the hosted Tinker service needs an API key", name, key)
		ch.Fix = fmt.Sprintf("export %s=<your Tinker API key> (from the Tinker console) before running orchestrate", name)
	case st == keyRefused:
		ch.Status, ch.Detail = CheckFail, fmt.Sprintf("%s (named by %s) is not set, and the server refused the request without a key", name, key)
		ch.Fix = fmt.Sprintf("export %s=<the key> before running orchestrate", name)
	case st == keyAccepted:
		ch.Status, ch.Detail = CheckWarn, fmt.Sprintf("%s (named by %s) is not set: requests go without a key, which this server accepted", name, key)
		ch.Fix = fmt.Sprintf("export %s=<the key> if the server should require one, or remove %s from the recipe", name, key)
	default:
		ch.Status, ch.Detail = CheckWarn, fmt.Sprintf("%s (named by %s) is not set: requests go without a key", name, key)
		ch.Fix = fmt.Sprintf("export %s=<the key> if the server needs one", name)
	}
	return ch, true
}

// refusedFix is the fix for a server that refused the credentials.
func (c *checker) refusedFix(key, name string) string {
	switch {
	case name == "":
		return fmt.Sprintf("the server wants a key: put it in an environment variable and name that variable in %s", key)
	case c.env[name] == "":
		return fmt.Sprintf("export %s=<the key> before running orchestrate (%s names it)", name, key)
	}
	return fmt.Sprintf("set %s to a key this server accepts", name)
}

// judge checks the judge: a probe chat completion, and its key.
func (c *checker) judge(ctx context.Context, j judge.Judge) []Check {
	u := j.URL()
	if !c.r.Hindsight.Enabled {
		return []Check{{Role: "judge", Server: u, Name: "chat", Status: CheckSkip, Detail: "hindsight.enabled is false: the judge is not used"}}
	}
	ch := Check{Role: "judge", Server: u, Name: "chat"}
	cctx, cancel := c.bounded(ctx)
	seed := int64(1)
	reply, err := j.Chat(cctx, judge.ChatRequest{
		Messages:  []judge.Message{{Role: "user", Content: "This is a connectivity probe. Reply with the word ok."}},
		MaxTokens: 8, Sampling: roles.JudgeSampling(c.r), Seed: &seed,
	})
	cancel()
	route := "POST /v1/chat/completions"
	if c.r.Judge.API == recipes.JudgeAPITinker {
		route = "asample (judge.api tinker)"
	}
	var te *roles.TokenizerError
	switch {
	case err == nil:
		ch.Status, ch.Detail = CheckOK, fmt.Sprintf("%s answered (%d characters) for model %q", route, len(reply), c.r.Judge.Model)
	case errors.As(err, &te):
		ch.Status, ch.Detail, ch.Fix = CheckFail, te.What, te.Fix
	case keyStateOf(err) == keyRefused && c.r.Judge.API == recipes.JudgeAPITinker:
		ch.Status, ch.Detail = CheckFail, route+" refused the credentials: "+reason(err)
		ch.Fix = c.refusedFix("judge.api_key_env", c.r.Judge.APIKeyEnv) + " (it is sent as X-API-Key)"
	case keyStateOf(err) == keyRefused:
		ch.Status, ch.Detail = CheckFail, route+" refused the credentials: "+reason(err)
		ch.Fix = c.refusedFix("judge.api_key_env", c.r.Judge.APIKeyEnv) + " (it is sent as Authorization: Bearer)"
	case c.r.Judge.API == recipes.JudgeAPITinker:
		ch.Status, ch.Detail = CheckFail, route+": "+reason(err)
		ch.Fix = "check judge.url (a Tinker server that lists judge.model in get_server_capabilities) and the key judge.api_key_env names"
	case transport.IsStatus(err, http.StatusNotFound):
		ch.Status, ch.Detail = CheckFail, route+": "+reason(err)
		ch.Fix = fmt.Sprintf("the server does not serve judge.model %q at /v1/chat/completions: set judge.model to a name from its GET /v1/models, or start vLLM with --served-model-name %s", c.r.Judge.Model, c.r.Judge.Model)
	default:
		ch.Status, ch.Detail = CheckFail, route+": "+reason(err)
		ch.Fix = "start the judge server (vLLM's OpenAI server, port 8100 in docs/gpu.md) or fix judge.url"
	}
	var out []Check
	if kc, ok := c.apiKey("judge", u, "judge.api_key_env", c.r.Judge.APIKeyEnv, keyStateOf(err)); ok {
		out = append(out, kc)
	}
	return append(out, ch)
}

// retrieverProbes are the probe queries: two, so that the answer must
// carry one result list per query.
var retrieverProbes = []string{"who composed the opera carmen", "capital city of australia"}

// retriever checks the retriever's answer and its shape.
func (c *checker) retriever(ctx context.Context, rt retriever.Retriever) []Check {
	ch := Check{Role: "retriever", Server: rt.URL(), Name: "retrieve"}
	topk := max(c.r.Retriever.TopK, 1)
	cctx, cancel := c.bounded(ctx)
	hits, err := rt.Retrieve(cctx, retrieverProbes, topk)
	cancel()
	shape := `the answer must be {"result": [one list per query: [{"document": {"id", "contents"} or {"title", "text", "contents"}, "score"}]]} (PROTOCOLS.md §4)`
	n := 0
	for _, h := range hits {
		n += len(h)
	}
	switch {
	case err != nil && isConnError(err):
		ch.Status, ch.Detail = CheckFail, "POST /retrieve: "+reason(err)
		ch.Fix = "start the retrieval server (Search-R1's retrieval_server.py, or orchestrate serve retriever --corpus FILE --addr HOST:PORT) or fix retriever.url"
	case err != nil:
		ch.Status, ch.Detail = CheckFail, "POST /retrieve: "+reason(err)
		ch.Fix = "point retriever.url at a Search-R1 retrieval server (retrieval_server.py, or orchestrate serve retriever): " + shape
	case len(hits) != len(retrieverProbes):
		ch.Status, ch.Detail = CheckFail, fmt.Sprintf("%d result lists for %d queries", len(hits), len(retrieverProbes))
		ch.Fix = shape
	case n == 0:
		ch.Status, ch.Detail = CheckWarn, "no passage for either probe query: the index may be empty"
		ch.Fix = "check the retrieval server's index and corpus (--index_path, --corpus_path)"
	default:
		for _, h := range hits {
			if len(h) > topk {
				ch.Status, ch.Detail = CheckWarn, fmt.Sprintf("%d hits for topk %d", len(h), topk)
				ch.Fix = "the server ignores topk; only the first retriever.topk hits are used"
				return []Check{ch}
			}
		}
		ch.Status = CheckOK
		ch.Detail = fmt.Sprintf("%d queries, %d+%d hits with id, contents and score (topk %d)", len(hits), len(hits[0]), len(hits[1]), topk)
		for _, h := range hits {
			if len(h) > 0 && h[0].IDFromContents {
				// Search-R1's BM25 retriever sends {title, text, contents}.
				ch.Detail = fmt.Sprintf("%d queries, %d+%d hits with contents and score, no id: ids made from the contents (topk %d)", len(hits), len(hits[0]), len(hits[1]), topk)
				break
			}
		}
	}
	return []Check{ch}
}

// isConnError reports whether err is a failure to reach the server rather
// than an answer.
func isConnError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &oe) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}

// healthz is implemented by trainer clients that can probe GET healthz.
type healthz interface {
	Healthz(ctx context.Context) error
}

// trainer checks the trainer: healthz, its base models, and its key.
func (c *checker) trainer(ctx context.Context, tr trainer.Trainer) []Check {
	u := tr.URL()
	var out []Check
	add := func(name string, st CheckStatus, detail, fix string) {
		out = append(out, Check{Role: "trainer", Server: u, Name: name, Status: st, Detail: detail, Fix: fix})
	}
	fixFor := func(err error) string {
		if keyStateOf(err) == keyRefused {
			return c.refusedFix("trainer.api_key_env", c.r.Trainer.APIKeyEnv) + " (it is sent as X-API-Key)"
		}
		if strings.Contains(u, HostedTinkerHost) {
			return "the hosted Tinker service did not answer: check this machine's network reaches it (and any proxy), or its status page"
		}
		return "start the Tinker API server (SkyRL, port 8300 in docs/gpu.md) or fix trainer.url"
	}
	key := keyUnknown
	// withKey puts the key row first, once the probes said what the server
	// made of the request, and the checkpoints directory's row last.
	withKey := func() []Check {
		if !c.full {
			return out
		}
		out = append(out, weightsCheck(c.r, u), optimizerCheck(c.r, u), c.lossAggCheck(ctx, u))
		// The embedded simulator's directory is sized by its own archives.
		if c.r.Sync.Kind == recipes.SyncTinker && c.r.Trainer.CheckpointsDir == "" {
			out = append(out, Check{Role: "trainer", Server: u, Name: "checkpoints dir", Status: CheckSkip,
				Detail: "sync.kind tinker reads no sampler archive: the checkpoints stay on the Tinker server, which the run's retention prunes (checkpoint.keep)"})
		} else {
			out = append(out, checkpointsDir(c.r.Trainer.CheckpointsDir, checkpointDiskNeed(c.r)))
		}
		if kc, ok := c.apiKey("trainer", u, "trainer.api_key_env", c.r.Trainer.APIKeyEnv, key); ok {
			return append([]Check{kc}, out...)
		}
		return out
	}
	if c.full {
		if h, ok := tr.(healthz); ok {
			cctx, cancel := c.bounded(ctx)
			err := h.Healthz(cctx)
			cancel()
			if err != nil {
				key = keyStateOf(err)
				add("healthz", CheckFail, "GET /api/v1/healthz: "+reason(err), fixFor(err))
				add("base model", CheckSkip, "the server did not answer GET /api/v1/healthz", "")
				return withKey()
			}
			add("healthz", CheckOK, "GET /api/v1/healthz answered", "")
		} else {
			add("healthz", CheckSkip, "this trainer client has no healthz probe", "")
		}
	}
	cctx, cancel := c.bounded(ctx)
	caps, err := tr.Capabilities(cctx)
	cancel()
	key = keyStateOf(err)
	base := c.r.Trainer.BaseModel
	switch {
	case err != nil:
		add("base model", CheckFail, "GET /api/v1/get_server_capabilities: "+reason(err), fixFor(err))
	case !slices.Contains(caps, base):
		fix := fmt.Sprintf("set trainer.base_model to one of: %s; or start the trainer with --base-model %s", listOrNone(caps), base)
		if l := strings.ToLower(base); strings.Contains(l, "qwen2.5") || strings.Contains(l, "qwen2-") {
			fix += " (SkyRL's JAX backend is LoRA-only and has no Qwen2 support: train Qwen2.5 on its fsdp or megatron backend with sync.kind sglang_disk, see docs/gpu.md)"
		}
		add("base model", CheckFail, fmt.Sprintf("does not support base model %q (it supports %s)", base, listOrNone(caps)), fix)
	default:
		add("base model", CheckOK, fmt.Sprintf("supports %q", base), "")
	}
	if c.full && err == nil {
		out = append(out, c.deleteRoute(ctx, tr))
	}
	return withKey()
}

// Probe names of the delete route row: a model and a checkpoint no
// server has.
const (
	deleteProbeModel = "model_hindsearch_doctor_probe"
	deleteProbeID    = "sampler_weights/hindsearch-doctor-probe"
)

// deleteRoute asks the trainer to delete a checkpoint of a model it does
// not have: a server with the DELETE checkpoint route answers that it has
// no such checkpoint (nothing is deleted), one without it (skyrl 0.3.0 from
// PyPI) answers FastAPI's bare 404, and the run's retention could then
// delete nothing: the trainer's disk keeps every saved state.
func (c *checker) deleteRoute(ctx context.Context, tr trainer.Trainer) Check {
	ch := Check{Role: "trainer", Server: tr.URL(), Name: "delete route"}
	cctx, cancel := c.bounded(ctx)
	err := tr.DeleteCheckpoint(cctx, deleteProbeModel, deleteProbeID)
	cancel()
	switch {
	case err == nil:
		ch.Status, ch.Detail = CheckOK, "DELETE training_runs/{id}/checkpoints/{id} is served (asked about a checkpoint no server has: not found)"
	case errors.Is(err, trainer.ErrNoDeleteRoute) && c.r.Trainer.CheckpointsDir != "":
		ch.Status = CheckWarn
		ch.Detail = fmt.Sprintf("DELETE training_runs/{id}/checkpoints/{id} answered FastAPI's bare 404 (the route came to SkyRL on 2026-07-16; skyrl 0.3.0 from PyPI lacks it): the run removes superseded checkpoints (checkpoint.keep %d) from trainer.checkpoints_dir %s itself, in SkyRL's layout; SkyRL's database keeps listing them", c.r.Checkpoint.Keep, c.r.Trainer.CheckpointsDir)
		ch.Fix = "nothing, if trainer.checkpoints_dir is the trainer's --checkpoints-base as this machine sees it; or run a SkyRL with the route (docs/gpu.md)"
	case errors.Is(err, trainer.ErrNoDeleteRoute):
		ch.Status = CheckWarn
		ch.Detail = fmt.Sprintf("DELETE training_runs/{id}/checkpoints/{id} answered FastAPI's bare 404: %v; the run's retention (checkpoint.keep %d) cannot delete a superseded checkpoint, so every state and sampler checkpoint the run saves stays on the trainer's disk", err, c.r.Checkpoint.Keep)
		ch.Fix = "set trainer.checkpoints_dir to the trainer's --checkpoints-base (the run then removes superseded checkpoints there), run a SkyRL with the route (its main branch since 2026-07-16; docs/gpu.md), or delete what trainer_checkpoints.json lists on the trainer's disk by hand"
	default:
		ch.Status, ch.Detail = CheckWarn, "a DELETE of a checkpoint no server has: "+reason(err)
		ch.Fix = "the run's retention deletes superseded checkpoints with this route: check the trainer's answer above (docs/conformance.md, Tinker API retention)"
	}
	return ch
}

// weightsCheck explains what trainer.lora_rank trains and whether
// sync.kind can load it: lora_config.rank 0 is full fine-tuning (SkyRL's
// FSDP and Megatron backends), whose sampler weights are a merged model
// that only a full-weight sync (sglang_disk) reloads; a rank above 0 trains
// a LoRA adapter, saved as the adapter alone (SkyRL's FSDP backend exports
// the PEFT adapter, not merged weights), which only sync.kind lora loads.
func weightsCheck(r *recipes.Recipe, server string) Check {
	ch := Check{Role: "trainer", Server: server, Name: "weights", Status: CheckOK}
	rank, kind := r.Trainer.LoRARank, r.Sync.Kind
	switch {
	case rank == 0 && kind == recipes.SyncLoRA:
		ch.Status = CheckFail
		ch.Detail = "trainer.lora_rank 0 trains full weights, but sync.kind lora loads LoRA adapters: the first sync finds no adapter in the sampler archive"
		ch.Fix = "set sync.kind sglang_disk (SGLang policy servers, docs/gpu.md) to sync full weights, or trainer.lora_rank above 0 (e.g. 32) to train a LoRA adapter"
	case rank > 0 && kind == recipes.SyncSGLangDisk:
		ch.Status = CheckFail
		ch.Detail = fmt.Sprintf("trainer.lora_rank %d trains a LoRA adapter, but sync.kind sglang_disk reloads merged full weights, and a LoRA model's sampler weights are the adapter alone (SkyRL's FSDP backend exports the PEFT adapter)", rank)
		ch.Fix = fmt.Sprintf("set trainer.lora_rank: 0 for full fine-tuning (SkyRL --backend fsdp or megatron), or sync.kind lora with vLLM started with --enable-lora --max-lora-rank %d", loraRankFlag(rank))
	case rank == 0 && kind == recipes.SyncSGLangDisk:
		ch.Detail = "lora_rank 0: full fine-tuning, which needs SkyRL's fsdp or megatron backend (its jax backend and the hosted service train LoRA only); the merged model it saves is reloaded with /update_weights_from_disk"
	case rank == 0:
		ch.Detail = "lora_rank 0: full fine-tuning (SkyRL's fsdp or megatron backend); sync.kind " + kind + " loads no weights"
	case kind == recipes.SyncLoRA:
		ch.Detail = fmt.Sprintf("lora_rank %d: a LoRA adapter, hot-loaded with /v1/load_lora_adapter (vLLM's --max-lora-rank at least %d)", rank, loraRankFlag(rank))
	default:
		ch.Detail = fmt.Sprintf("lora_rank %d: a LoRA adapter; sync.kind %s loads no weights", rank, kind)
	}
	return ch
}

// skyrlFixedAdam are the AdamW settings SkyRL's FSDP backend fixes when it
// creates its optimizer (skyrl/train/config/config.py OptimizerConfig:
// adam_betas [0.9, 0.999], weight_decay 0.01; fsdp_strategy.py passes no
// eps, so torch's AdamW default 1e-8). Its optim_step applies only
// learning_rate (skyrl_train_backend.py). The Megatron backend shares the
// optim_step and takes the same betas and weight decay; its eps is
// megatron-core's default, UNVERIFIED.
var skyrlFixedAdam = trainer.AdamParams{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}

// optimizerCheck compares the recipe's Adam settings with those SkyRL's
// FSDP and Megatron backends fix (their optim_step applies only the
// learning rate). lora_rank 0 means such a backend (the only Tinker
// servers that fine-tune full weights), so a difference is a warning; for
// a LoRA rank the backend is unknown (SkyRL's JAX backend and the hosted
// service apply every field), so a difference is only noted (skip).
func optimizerCheck(r *recipes.Recipe, server string) Check {
	ch := Check{Role: "trainer", Server: server, Name: "optimizer"}
	if r.Trainer.URL == recipes.Embedded {
		ch.Status, ch.Detail = CheckOK, "the simulated trainer applies every adam_params field of each optim_step"
		return ch
	}
	tr, want := r.Trainer, skyrlFixedAdam
	var diffs []string
	for _, f := range []struct {
		key       string
		got, want float64
	}{{"trainer.beta1", tr.Beta1, want.Beta1}, {"trainer.beta2", tr.Beta2, want.Beta2},
		{"trainer.eps", tr.Eps, want.Eps}, {"trainer.weight_decay", tr.WeightDecay, want.WeightDecay}} {
		if !(math.Abs(f.got-f.want) <= 1e-12*math.Max(math.Abs(f.got), math.Abs(f.want))) {
			diffs = append(diffs, fmt.Sprintf("%s %g (the backend's %g)", f.key, f.got, f.want))
		}
	}
	fixed := fmt.Sprintf("beta1 %g, beta2 %g, eps %g, weight_decay %g", want.Beta1, want.Beta2, want.Eps, want.WeightDecay)
	switch {
	case len(diffs) == 0:
		ch.Status = CheckOK
		ch.Detail = "the recipe's Adam settings equal the ones SkyRL's fsdp and megatron backends fix at optimizer creation (" + fixed + "), so they hold on any backend"
	case tr.LoRARank == 0:
		ch.Status = CheckWarn
		ch.Detail = fmt.Sprintf("lora_rank 0 trains on SkyRL's fsdp or megatron backend, whose optim_step applies only learning_rate: its optimizer keeps %s, and the recipe's %s are not used",
			fixed, strings.Join(diffs, ", "))
		ch.Fix = fmt.Sprintf("set trainer.beta1: %g, trainer.beta2: %g, trainer.eps: %g, trainer.weight_decay: %g so the recipe says what trains, or start SkyRL with --backend-config overriding trainer.policy.optimizer_config.adam_betas and .weight_decay (eps cannot be set on the fsdp backend; check against your version)",
			want.Beta1, want.Beta2, want.Eps, want.WeightDecay)
	default:
		ch.Status = CheckSkip
		ch.Detail = fmt.Sprintf("lora_rank %d: doctor cannot tell the backend; SkyRL's jax backend and the hosted service apply every adam_params field, but its fsdp and megatron backends only learning_rate (keeping %s), and the recipe has %s",
			tr.LoRARank, fixed, strings.Join(diffs, ", "))
	}
	return ch
}

// checkpointsDir checks the directory the sync step reads the trainer's
// saved weights from (SkyRL's checkpoints base, shared with this machine).
func checkpointsDir(dir string, need diskNeed) Check {
	ch := Check{Role: "trainer", Server: dir, Name: "checkpoints dir"}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist) && need.embedded:
		ch.Status, ch.Detail = CheckOK, "does not exist yet: the embedded simulated trainer creates it when it first saves"
	case errors.Is(err, os.ErrNotExist):
		ch.Status, ch.Detail = CheckWarn, "does not exist yet: the trainer must create it when it first saves weights"
		ch.Fix = fmt.Sprintf("start the trainer with --checkpoints-base %s (the same path, on a filesystem this machine reads), or set trainer.checkpoints_dir to its checkpoints base", dir)
	case err != nil:
		ch.Status, ch.Detail, ch.Fix = CheckFail, reason(err), "make trainer.checkpoints_dir readable by this user"
	case !fi.IsDir():
		ch.Status, ch.Detail, ch.Fix = CheckFail, "is not a directory", "set trainer.checkpoints_dir to the trainer's checkpoints base directory"
	default:
		if _, err := os.ReadDir(dir); err != nil {
			ch.Status, ch.Detail, ch.Fix = CheckFail, reason(err), "make trainer.checkpoints_dir readable by this user"
		} else {
			ch.Status, ch.Detail = CheckOK, "exists and is readable here (the trainer's saved weights are read from it)"
		}
	}
	if ch.Status == CheckFail || need.bytes <= 0 {
		if need.how != "" {
			ch.Detail += "; " + need.how
		}
		return ch
	}
	free, ok := FreeBytes(dir)
	switch {
	case !ok:
		ch.Detail += fmt.Sprintf("; the trainer needs ~%s at peak (%s), free space unknown", gb(need.bytes), need.how)
	case free < need.bytes:
		ch.Status = CheckWarn
		ch.Detail += fmt.Sprintf("; %s free, but the trainer needs ~%s at peak (%s)", gb(free), gb(need.bytes), need.how)
		ch.Fix = "free space there, lower checkpoint.keep, or start the trainer with --checkpoints-base on a larger disk (and set trainer.checkpoints_dir to it)"
	default:
		ch.Detail += fmt.Sprintf("; %s free, the trainer needs ~%s at peak (%s)", gb(free), gb(need.bytes), need.how)
	}
	return ch
}

// diskNeed is what the trainer's checkpoint directory needs at peak.
type diskNeed struct {
	bytes    int64  // 0: not estimated
	how      string // the formula, or why there is none
	embedded bool   // the embedded simulator's directory
}

// reModelSize finds a model's size in billions of parameters in its name
// ("Qwen/Qwen2.5-3B-Instruct": 3).
var reModelSize = regexp.MustCompile(`(?i)(\d+(?:\.\d+)?)b(?:-|$|_)`)

// checkpointDiskNeed estimates the peak of the trainer's checkpoint
// directory for r: checkpoint.keep states plus the one being written, and
// three sampler exports (the resume point's, the previous step's and the
// one being written). On SkyRL's FSDP backend at rank 0 a state is the
// fp32 weights and two Adam moments (12 bytes a parameter, an uncompressed
// tar) and a sampler export the fp32 weights (4 bytes a parameter); the
// embedded simulator's sizes are its own.
func checkpointDiskNeed(r *recipes.Recipe) diskNeed {
	keep := max(r.Checkpoint.Keep, 1)
	var state, sampler int64
	if r.Trainer.URL == recipes.Embedded {
		st, sa, err := simtrainer.CheckpointSizes(weights.ArchiveLayout(r.Sim.Trainer.Archive), r.Policy.Model, r.Trainer.LoRARank)
		if err != nil {
			return diskNeed{how: "simulator sizes unknown: " + err.Error()}
		}
		state, sampler = st, sa
	} else {
		if r.Trainer.LoRARank > 0 {
			return diskNeed{how: "LoRA states and adapters are small; not estimated"}
		}
		params := 3.09e9 // Qwen2.5-3B
		if m := reModelSize.FindStringSubmatch(r.Trainer.BaseModel); m != nil && !strings.Contains(r.Trainer.BaseModel, "Qwen2.5-3B") {
			b, _ := strconv.ParseFloat(m[1], 64)
			params = b * 1e9
		} else if m == nil {
			return diskNeed{how: fmt.Sprintf("size of %s unknown; per state 12 bytes and per sampler export 4 bytes a parameter", r.Trainer.BaseModel)}
		}
		state, sampler = int64(12*params), int64(4*params)
	}
	return diskNeed{bytes: int64(keep+1)*state + 3*sampler, embedded: r.Trainer.URL == recipes.Embedded,
		how: fmt.Sprintf("(checkpoint.keep %d + 1) x %s a state + 3 x %s a sampler export", keep, gb(state), gb(sampler))}
}

// gb renders a byte count in GB (decimal), or in KB below 1 MB.
func gb(n int64) string {
	if n < 1e6 {
		return fmt.Sprintf("%.1f KB", float64(n)/1e3)
	}
	return fmt.Sprintf("%.1f GB", float64(n)/1e9)
}

// reason is why a probe failed, without what the table's columns already
// say (the role, the server's URL): the status and body of a refusal, the
// network error of a server that was not reached, or the error's message.
func reason(err error) string {
	var se *transport.StatusError
	var oe *net.OpError
	switch {
	case err == nil:
		return "no answer"
	case errors.As(err, &se):
		return short(err)
	case errors.As(err, &oe):
		return oe.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer before the check's deadline"
	}
	return short(err)
}

// listOrNone joins names, or says "none".
func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// syncDir checks that sync.dir takes a file here and whether the policy
// servers can read it.
func (c *checker) syncDir() []Check {
	dir := c.r.Sync.Dir
	out := []Check{probeDir("sync", "sync dir", dir, fmt.Sprintf("make %s writable by this user, or set sync.dir to a writable directory the policy servers can read", dir))}
	var remote []string
	for _, p := range c.deps.Policies {
		if !isLoopback(p.URL()) {
			remote = append(remote, hostOf(p.URL()))
		}
	}
	ch := Check{Role: "sync", Server: dir, Name: "policy access"}
	if len(remote) == 0 {
		ch.Status, ch.Detail = CheckOK, "every policy replica is on this machine (loopback)"
	} else {
		ch.Status = CheckWarn
		ch.Detail = fmt.Sprintf("policy replicas on %s load weights from this directory: it must be on a filesystem they mount at the same path", strings.Join(slices.Compact(remote), ", "))
		ch.Fix = fmt.Sprintf("mount %s at the same path on the policy hosts (e.g. NFS), or set sync.dir to such a shared mount", dir)
	}
	return append(out, ch)
}

// probeDir creates, writes, reads back and removes a probe file in dir,
// creating dir if needed and removing the directories it created: the row
// name of role, with fix when it fails.
func probeDir(role, name, dir, fix string) Check {
	ch := Check{Role: role, Server: dir, Name: name}
	fail := func(format string, a ...any) Check {
		ch.Status, ch.Detail, ch.Fix = CheckFail, fmt.Sprintf(format, a...), fix
		return ch
	}
	// The directories that do not exist yet, deepest first.
	var created []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		created = append(created, d)
	}
	defer func() {
		for _, d := range created {
			_ = os.Remove(d) // only if still empty
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail("create: %v", err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	probe := filepath.Join(dir, ".hindsearch-doctor-"+hex.EncodeToString(rnd[:]))
	want := []byte("hindsearch doctor probe " + hex.EncodeToString(rnd[:]) + "\n")
	if err := os.WriteFile(probe, want, 0o644); err != nil {
		return fail("write a probe file: %v", err)
	}
	got, err := os.ReadFile(probe)
	rmErr := os.Remove(probe)
	switch {
	case err != nil:
		return fail("read the probe file back: %v", err)
	case !bytes.Equal(got, want):
		return fail("the probe file read back differs from what was written (%d bytes vs %d)", len(got), len(want))
	case rmErr != nil:
		return fail("remove the probe file: %v", rmErr)
	}
	ch.Status, ch.Detail = CheckOK, "a probe file was created, written, read back and removed"
	return ch
}

// isLoopback reports whether the URL's host is a loopback name or address.
func isLoopback(raw string) bool {
	h := hostOf(raw)
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// hostOf is the host name of a URL (the whole string when it does not
// parse).
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return raw
	}
	return u.Hostname()
}
