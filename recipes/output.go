package recipes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// RedactedMark replaces credentials in URLs printed or saved by Redacted.
const RedactedMark = "REDACTED"

// Redacted returns a deep copy of r that is safe to print and save: in every
// URL (policy.urls, judge.url, retriever.url, trainer.url) the user
// information (user:pass@) becomes REDACTED@, every query value becomes
// REDACTED (a bare query item becomes REDACTED), and so does a fragment. A
// value that does not parse as a URL but holds '@' or '?' becomes REDACTED.
// The api_key_env keys hold the names of environment variables, not keys,
// and stay.
func (r *Recipe) Redacted() Recipe {
	c := *r
	c.Policy.URLs = slices.Clone(r.Policy.URLs)
	for i, u := range c.Policy.URLs {
		c.Policy.URLs[i] = redactURL(u)
	}
	c.Judge.URL = redactURL(r.Judge.URL)
	c.Retriever.URL = redactURL(r.Retriever.URL)
	c.Trainer.URL = redactURL(r.Trainer.URL)
	c.Train.Data = slices.Clone(r.Train.Data)
	c.Eval.Datasets = maps.Clone(r.Eval.Datasets)
	return c
}

// redactURL masks the credentials of one URL.
func redactURL(s string) string {
	if s == "" || s == Embedded {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		if strings.ContainsAny(s, "@?") {
			return RedactedMark
		}
		return s
	}
	if u.User != nil {
		u.User = url.User(RedactedMark)
	}
	if u.RawQuery != "" || u.ForceQuery {
		parts := strings.Split(u.RawQuery, "&")
		for i, p := range parts {
			if name, _, ok := strings.Cut(p, "="); ok {
				parts[i] = name + "=" + RedactedMark
			} else if p != "" {
				parts[i] = RedactedMark
			}
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = RedactedMark, ""
	}
	return u.String()
}

// YAML marshals r with the recipe's key names, in schema order, indented by
// two spaces. Loading the result gives r again (after Load's resolution,
// every path is absolute). It does not redact: to save or print a recipe,
// marshal r.Redacted().
func (r *Recipe) YAML() ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("recipe yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("recipe yaml: %w", err)
	}
	return b.Bytes(), nil
}

// Switches returns a one-line summary of the ablation switches for table
// captions: "hindsight=off" when hindsight is disabled, otherwise
//
//	hindsight=on gold=on|off loss=L broadcast=B teacher=T coef=X clamp=Y judge=MODEL prompt=P [term_agg=A] [hint=H]
//
// where numbers are printed in their shortest form and P is "default" for
// the program's judge prompt or "custom-" followed by the first 8 hex
// digits of the prompt's SHA-256, so that runs with different prompts are
// told apart; then, when set, " filter=C1,C2" (train.filter) and
// " turn_penalty=X(C1,C2)" (rollout.turn_penalty and its causes).
func (r *Recipe) Switches() string {
	return r.hindsightSwitches() + r.abnormalSwitches()
}

// abnormalSwitches names train.filter and rollout.turn_penalty when set
// ("" otherwise, so that a record of a recipe without them reads as
// before they existed).
func (r *Recipe) abnormalSwitches() string {
	var s string
	if len(r.Train.Filter) > 0 {
		s += " filter=" + strings.Join(r.Train.Filter, ",")
	}
	if p := r.Rollout.TurnPenalty; p > 0 {
		s += " turn_penalty=" + strconv.FormatFloat(p, 'g', -1, 64) + "(" + strings.Join(r.Rollout.TurnPenaltyCauses, ",") + ")"
	}
	return s
}

// hindsightSwitches names the hindsight switches.
func (r *Recipe) hindsightSwitches() string {
	h := r.Hindsight
	if !h.Enabled {
		return "hindsight=off"
	}
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	num := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	prompt := "default"
	if h.Prompt != "" {
		sum := sha256.Sum256([]byte(h.Prompt))
		prompt = "custom-" + hex.EncodeToString(sum[:4])
	}
	s := fmt.Sprintf("hindsight=on gold=%s loss=%s broadcast=%s teacher=%s coef=%s clamp=%s judge=%s prompt=%s",
		onOff(h.GoldAnswer), h.Loss, h.Broadcast, h.Teacher, num(h.Coef), num(h.Clamp), r.Judge.Model, prompt)
	// Named only when not the default, so that a record of a recipe from
	// before the key reads as it did.
	if h.TermAgg != "" && h.TermAgg != TermAggAdvantage {
		s += " term_agg=" + h.TermAgg
	}
	if h.Hint != "" && h.Hint != HintJudge {
		s += " hint=" + h.Hint
	}
	return s
}

// Optimisation names, in a few words for captions, how the recipe
// optimises (issue 33's keys): the loss, the optim_steps a step and their
// mini-batch, the warmup, the loss aggregation, the GRPO standard
// deviation, the KL and entropy coefficients and the final answer round.
func (r *Recipe) Optimisation() string {
	t := r.Trainer
	steps := "1 optim_step a step"
	if n := r.OptimSteps(); n > 1 {
		steps = fmt.Sprintf("%d optim_steps a step (mini-batches of %d)", n, r.MiniBatch())
	}
	num := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	s := fmt.Sprintf("%s, %s, warmup %d, %s, std %s, kl %s, entropy %s", t.Loss, steps, t.LRWarmupSteps, t.LossAgg, t.AdvantageStd, num(t.KLCoef), num(t.EntropyCoef))
	if r.Rollout.FinalAnswerRound {
		s += ", final answer round"
	}
	return s
}

// MiniBatch is the number of trajectories of one optim_step
// (trainer.mini_batch_size): the whole step's when it is 0 or not
// smaller.
func (r *Recipe) MiniBatch() int {
	total := r.Train.BatchSize * r.Train.GroupSize
	if m := r.Trainer.MiniBatchSize; m > 0 && m < total {
		return m
	}
	return total
}

// OptimSteps is the number of optim_steps a step makes: one per
// mini-batch (the last one may be smaller).
func (r *Recipe) OptimSteps() int {
	m := r.MiniBatch()
	if m <= 0 {
		return 1
	}
	return (r.Train.BatchSize*r.Train.GroupSize + m - 1) / m
}

// NativeAgg says whether trainer.loss_agg agg is what a trainer of
// backend (a resolved trainer.backend) computes by itself, so that every
// datum's advantages go as they are: SkyRL's JAX backend takes each
// datum's token mean and averages them (seq-mean-token-mean), its FSDP
// backend and the hosted service sum tokens (sum).
func NativeAgg(agg, backend string) bool {
	if backend == BackendSkyRLJAX {
		return agg == LossAggSeqMeanTokenMean
	}
	return agg == LossAggSum
}

// KLOnPolicyServers says whether trainer.kl_coef scores trajectories
// under policy.model on the policy servers (no reference.urls), which
// must then serve the initial weights all run long.
func (r *Recipe) KLOnPolicyServers() bool {
	return r.Trainer.KLCoef > 0 && len(r.Reference.URLs) == 0
}

// OPDApart says whether the OPD term is a loss of its own
// (hindsight.term_agg search-mean with a term), not part of the advantage.
func (r *Recipe) OPDApart() bool {
	h := r.Hindsight
	return h.Enabled && h.Loss != HindsightLossNone && h.TermAgg == TermAggSearchMean
}

// TeacherOnReferences says whether the hindsight teacher (hindsight.teacher
// initial, with an OPD term) scores its hinted contexts on the reference
// servers: whenever reference.urls are named, one frozen fleet serves both
// the KL reference and the teacher, on every sync kind. Without them an
// initial teacher scores policy.model on the policy servers (sync.kind
// lora, which keeps the base weights served beside the adapters) or on
// base-model sessions (sync.kind tinker).
func (r *Recipe) TeacherOnReferences() bool {
	h := r.Hindsight
	return h.Enabled && h.Loss != HindsightLossNone && h.Teacher == TeacherInitial && len(r.Reference.URLs) > 0
}

// EmbeddedCount is the number of "embedded" entries of urls.
func EmbeddedCount(urls []string) int {
	n := 0
	for _, u := range urls {
		if u == Embedded {
			n++
		}
	}
	return n
}
