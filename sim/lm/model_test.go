package lm

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
)

// draws is the number of samples of the statistical tests.
func draws() int {
	if raceEnabled || testing.Short() {
		return 3000
	}
	return 20000
}

// gens is how many draws of a statistical test go through Generate.
func gens(n int) int {
	if raceEnabled || testing.Short() {
		return n / 10
	}
	return n
}

// checkSampling samples the next token after ctx n times with Generate's
// sampler (MaxTokens 1, a distinct seed per draw; about nGen of the draws
// through Generate itself) and checks that (1) the reported
// logprob of each draw is exactly Score's logprob of that token after ctx
// (raw, whatever the temperature), (2) the exponentiated logprobs of all
// tokens sum to 1, and (3) the empirical frequencies match the
// distribution those logprobs define (sharpened by the temperature): each
// token of the structured support is its own bin, every other token falls in
// one bin, and each bin's count must lie within 5 sigma of its expectation.
// It returns the probabilities of the support bins.
func checkSampling(t *testing.T, m *Model, params Params, ctx []int, n, nGen int, temp float64) map[int]float64 {
	t.Helper()
	tm, partial := turnModelFor(t, m, params, ctx)
	support := sortedKeys(tm.nextDist(partial))
	V := m.tk.VocabSize()
	floor := math.Log(m.eps / float64(V))
	lp := map[int]float64{}
	total := 0.0
	seq := append(slices.Clone(ctx), 0)
	for _, x := range support {
		seq[len(ctx)] = x
		lp[x] = m.Score(params, seq)[len(ctx)]
		total += math.Exp(lp[x])
	}
	// An off-support token scores exactly the floor.
	off := 0
	for ; off < V; off++ {
		if _, in := lp[off]; !in {
			break
		}
	}
	seq[len(ctx)] = off
	if got := m.Score(params, seq)[len(ctx)]; math.Abs(got-floor) > 1e-12 {
		t.Errorf("off-support token %d: logprob %v, want the floor %v", off, got, floor)
	}
	total += float64(V-len(support)) * m.eps / float64(V)
	if math.Abs(total-1) > 1e-9 {
		t.Errorf("probabilities sum to %v, want 1", total)
	}

	// The distribution sampled from: p^(1/T), normalised.
	q := map[int]float64{}
	z := 0.0
	for _, x := range support {
		q[x] = math.Exp(lp[x] / temp)
		z += q[x]
	}
	qOther := float64(V-len(support)) * math.Exp(floor/temp)
	z += qOther
	for x := range q {
		q[x] /= z
	}
	qOther /= z

	counts := map[int]int{}
	other := 0
	sp := Sampling{Temperature: temp, TopP: 1, TopK: -1, MaxTokens: 1}
	for i := 0; i < n; i++ {
		// Generate rebuilds the turn's candidates on every call; most draws
		// call the sampler it uses on the turn model it builds, and every
		// nGen-th draw goes through Generate itself, which must draw the
		// same token with the same seed.
		rng := rand.New(rand.NewPCG(uint64(i), 0x5eed))
		x, _ := m.sampleNext(tm, partial, sp, nil, rng)
		rep := tm.logProb(partial, x, nil, 0)
		if i%(n/nGen) == 0 {
			g := m.Generate(params, ctx, sp, rand.New(rand.NewPCG(uint64(i), 0x5eed)))
			if len(g.IDs) != 1 || len(g.Logprobs) != 1 {
				t.Fatalf("draw %d: %d tokens, %d logprobs", i, len(g.IDs), len(g.Logprobs))
			}
			if g.IDs[0] != x || g.Logprobs[0] != rep {
				t.Fatalf("draw %d: Generate drew %d (logprob %v), its sampler %d (%v)", i, g.IDs[0], g.Logprobs[0], x, rep)
			}
		}
		want, in := lp[x]
		if !in {
			want = floor
			other++
		} else {
			counts[x]++
		}
		if math.Abs(rep-want) > 1e-12 {
			t.Fatalf("draw %d: token %d reported logprob %v, Score says %v", i, x, rep, want)
		}
	}
	check := func(name string, obs int, p float64) {
		t.Helper()
		e := float64(n) * p
		sd := math.Sqrt(float64(n) * p * (1 - p))
		if math.Abs(float64(obs)-e) > 5*sd+1 {
			t.Errorf("%s: %d of %d draws, expected %.1f (p=%.4g, sd %.1f)", name, obs, n, e, p, sd)
		}
	}
	for _, x := range support {
		check(m.tk.Piece(x), counts[x], q[x])
	}
	check("other tokens", other, qOther)
	out := map[int]float64{}
	for _, x := range support {
		out[x] = math.Exp(lp[x])
	}
	return out
}

// spread counts the bins with probability in [lo, hi].
func spread(ps map[int]float64, lo, hi float64) int {
	n := 0
	for _, p := range ps {
		if p >= lo && p <= hi {
			n++
		}
	}
	return n
}

// firstDiff is the index of the first token where a and b differ.
func firstDiff(a, b []int) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// samplingContexts are three contexts of a real HotpotQA question: at the
// token that decides search or answer, at the first query token inside
// <search>, and at the first answer token after an information block.
func samplingContexts(t *testing.T, f *fixture) (decide, query, answer []int) {
	t.Helper()
	q := f.hotpot[2].Q
	prompt := f.tk.Encode(promptText(q, ""))
	ts, ta := f.tk.Encode(thoughtSearch), f.tk.Encode(thoughtAnswer)
	decide = concat(prompt, ts[:firstDiff(ts, ta)])
	query = concat(prompt, f.tk.Encode(thoughtSearch+"<search>"))
	info := format.InfoBlock(f.corpus[20:23])
	answer = concat(prompt, f.tk.Encode(thoughtSearch+"<search> "+q+" </search>"), f.tk.Encode(info),
		f.tk.Encode(thoughtAnswer+"<answer>"))
	// The contexts must be prefixes of candidate turns.
	for _, c := range [][]int{decide, query, answer} {
		tm, partial := turnModelFor(t, f.model, InitialParams(), c)
		if d := tm.nextDist(partial); len(d) < 2 {
			t.Fatalf("context ends where the policy has %d choices; want several", len(d))
		}
	}
	return decide, query, answer
}

// TestSampledLogprobsAreTheSamplingDistribution checks (statistically) that
// the logprobs the policy reports are those of the distribution it samples
// from, with the uniform floor included, at three positions of a turn.
func TestSampledLogprobsAreTheSamplingDistribution(t *testing.T) {
	f := getFixture(t)
	decide, query, answer := samplingContexts(t, f)
	n := draws()
	params := InitialParams()
	// A big floor makes the "any other token" bin matter.
	floored := NewModel(f.tk, 0.05)
	t.Run("decide", func(t *testing.T) {
		ps := checkSampling(t, floored, params, decide, n, gens(2000), 1)
		if spread(ps, 0.1, 0.9) < 2 {
			t.Errorf("want two likely choices at the search/answer token, got %v", ps)
		}
	})
	t.Run("query", func(t *testing.T) {
		ps := checkSampling(t, f.model, params, query, n, gens(2000), 1)
		if spread(ps, 0.02, 0.98) < 3 {
			t.Errorf("want several likely query tokens, got %v", ps)
		}
	})
	t.Run("answer", func(t *testing.T) {
		ps := checkSampling(t, floored, params, answer, n, gens(300), 1)
		if spread(ps, 0.01, 0.99) < 5 {
			t.Errorf("want many likely answer tokens, got %v", ps)
		}
	})
	t.Run("temperature", func(t *testing.T) {
		// Sampling at T=0.5 follows p^2 normalised; the reported logprobs
		// stay the raw ones (vLLM's default).
		checkSampling(t, floored, params, query, n, gens(1000), 0.5)
	})
}

// TestTopKTopP checks that top-k and top-p restrict sampling to the most
// likely tokens and that the reported logprobs stay the raw ones.
func TestTopKTopP(t *testing.T) {
	f := getFixture(t)
	_, query, _ := samplingContexts(t, f)
	params := InitialParams()
	tm, partial := turnModelFor(t, f.model, params, query)
	dist := tm.nextDist(partial)
	ids := sortedKeys(dist)
	slices.SortStableFunc(ids, func(a, b int) int {
		switch {
		case dist[a] > dist[b]:
			return -1
		case dist[a] < dist[b]:
			return 1
		}
		return 0
	})
	// The top two, and every token as likely as the second (vLLM keeps
	// the ties at the k-th).
	var top2 []int
	for _, id := range ids {
		if dist[id] >= dist[ids[1]] {
			top2 = append(top2, id)
		}
	}
	for i := 0; i < draws()/40; i++ {
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		g := f.model.Generate(params, query, Sampling{Temperature: 1, TopK: 2, MaxTokens: 1}, rng)
		if !slices.Contains(top2, g.IDs[0]) {
			t.Fatalf("top_k 2 sampled %d (%q), not one of the top two (with ties) %v", g.IDs[0], f.tk.Piece(g.IDs[0]), top2)
		}
		want := f.model.Score(params, append(slices.Clone(query), g.IDs[0]))[len(query)]
		if math.Abs(g.Logprobs[0]-want) > 1e-12 {
			t.Fatalf("top_k: reported %v, raw logprob %v", g.Logprobs[0], want)
		}
		g = f.model.Generate(params, query, Sampling{Temperature: 1, TopP: 1e-3, MaxTokens: 1}, rng)
		if g.IDs[0] != ids[0] {
			t.Fatalf("top_p 0.001 sampled %q, want the most likely %q", f.tk.Piece(g.IDs[0]), f.tk.Piece(ids[0]))
		}
	}
}

// TestGenerateLogprobsEqualScore checks that, for multi-turn trajectories
// sampled at temperature 1 against the real retriever, every token's
// reported logprob equals Score on the concatenated sequence.
func TestGenerateLogprobsEqualScore(t *testing.T) {
	f := getFixture(t)
	docs := bm25Docs(t)
	qs := evalQuestions(f, 12)
	params := InitialParams()
	params[PSearchBias] = 0.5 // search more, for longer trajectories
	turns := 0
	for i, q := range qs {
		rng := rand.New(rand.NewPCG(uint64(i), 11))
		tr := rollout(f.model, params, q.Q, "", trainSampling(), rng, 4, docs)
		got := f.model.Score(params, tr.ids)
		if got[0] != 0 {
			t.Errorf("Score entry 0 = %v, want 0", got[0])
		}
		for _, p := range tr.policyPositions() {
			if math.Abs(got[p]-tr.lps[p]) > 1e-9 {
				t.Errorf("question %d, token %d (%q): Generate reported %v, Score %v", i, p, f.tk.Piece(tr.ids[p]), tr.lps[p], got[p])
			}
		}
		turns += len(tr.queries)
	}
	if turns < len(qs)/2 {
		t.Errorf("only %d searches in %d trajectories: the test should cover multi-turn sequences", turns, len(qs))
	}
}

// cutBlockContext is a context whose last <information> block was cut
// after keep tokens, as the rollout cuts one at rollout.max_obs_tokens
// (Search-R1's cut: the block tokenized alone, its closing tag lost,
// nothing appended).
func cutBlockContext(t *testing.T, f *fixture, q string, keep int) []int {
	t.Helper()
	block := f.tk.Encode(format.InfoBlock(search(t, []string{q}, 3)[0]))
	if len(block) <= keep {
		t.Fatalf("a block of %d tokens is not cut at %d", len(block), keep)
	}
	return concat(f.tk.Encode(promptText(q, "")+thoughtSearch+"<search> "+q+" </search>"), block[:keep])
}

// TestAgentClosesACutBlock checks the agent's turn after a block cut at
// rollout.max_obs_tokens: it writes CloseInfoText, then takes a turn on
// what it read (a search or an answer, the cut block's passages read as
// the latest block), or, at sim.agent.cut_stop_rate, ends the turn at once;
// every token it samples scores as sampled.
func TestAgentClosesACutBlock(t *testing.T) {
	f := getFixture(t)
	params := InitialParams()
	for _, rate := range []float64{0, 0.5, 1} {
		m := *f.model
		m.SetBehaviour(Behaviour{CutStopRate: rate})
		closes, valid, stops, n := 0, 0, 0, 0
		for i, q := range evalQuestions(f, 6) {
			for _, keep := range []int{20, 90} {
				ctx := cutBlockContext(t, f, q.Q, keep)
				rng := rand.New(rand.NewPCG(uint64(i), uint64(keep)))
				for range 5 {
					n++
					g := m.Generate(params, ctx, trainSampling(), rng)
					switch {
					case slices.Equal(g.IDs, []int{m.eos}):
						stops++
					case strings.HasPrefix(g.Text, CloseInfoText):
						closes++
						if kind, _ := format.ParseAction(g.Text); kind != format.ActionNone {
							valid++
						}
					default:
						t.Logf("rate %v, question %d, cut at %d: %q", rate, i, keep, g.Text)
					}
					got := m.Score(params, concat(ctx, g.IDs))
					for j, lp := range g.Logprobs {
						if p := len(ctx) + j; math.Abs(got[p]-lp) > 1e-9 {
							t.Errorf("rate %v, question %d, token %d (%q): Generate reported %v, Score %v", rate, i, j, f.tk.Piece(g.IDs[j]), lp, got[p])
						}
					}
				}
				if rate > 0 {
					continue
				}
				var text strings.Builder
				for _, id := range ctx {
					text.WriteString(f.tk.Piece(id))
				}
				st := parseState(text.String() + CloseInfoText)
				if len(st.blocks) != 1 || len(st.blocks[0]) == 0 {
					t.Errorf("question %d, cut at %d: %d blocks read after the agent closed it, want 1 with passages", i, keep, len(st.blocks))
				}
			}
		}
		if closes+stops != n || valid != closes {
			t.Errorf("rate %v: of %d turns after a cut block, %d closed it (%d then with a valid action) and %d stopped; want every turn one or the other, every close with an action", rate, n, closes, valid, stops)
		}
		// The stops' share is the rate: 60 turns, so within 0.2 of it.
		if share := float64(stops) / float64(n); math.Abs(share-rate) > 0.2 {
			t.Errorf("rate %v: %d of %d turns stopped", rate, stops, n)
		}
	}
}

// TestScoreAnySequence checks that Score gives a finite logprob at every
// position of sequences the model did not produce, and never panics.
func TestScoreAnySequence(t *testing.T) {
	f := getFixture(t)
	tk, m := f.tk, f.model
	rng := rand.New(rand.NewPCG(3, 4))
	q := f.hotpot[5].Q
	randomIDs := make([]int, 400)
	for i := range randomIDs {
		randomIDs[i] = rng.IntN(tk.VocabSize())
	}
	seqs := map[string][]int{
		"random ids": randomIDs,
		"foreign text": tk.Encode(promptText(q, "") + "<think> Let me think about it, 日本語 ✓. </think>\n<search> something nobody would search </search>" +
			format.InfoBlock(f.corpus[40:43]) + "<answer> a made-up answer </answer><|im_end|>"),
		"no chat template":      tk.Encode(format.UserPrompt(q, "") + "<search> " + q + " </search><answer> x </answer>"),
		"two assistant headers": tk.Encode(promptText(q, "") + "<answer> yes </answer>" + assistantHeader + "<answer> no </answer>"),
		"specials only":         {0, 1, 2, 1, 2, 0, 0},
		"one token":             {5},
		"empty":                 {},
		"hint without question": tk.Encode(ChatTemplate([]ChatMessage{{Role: "user", Content: "Hint: \"x\""}}, true) + "<search> x </search>"),
		"truncated information": tk.Encode(promptText(q, "") + thoughtSearch + "<search> x </search>\n\n<information>Doc 1(Title: \"A) b" + "</information>\n\n<answer> b </answer>"),
	}
	// Random ids after a real prompt: every turn start, mid-turn divergence
	// and the end-of-turn token get exercised.
	for k := 0; k < 5; k++ {
		s := tk.Encode(promptText(f.hotpot[k].Q, ""))
		for i := 0; i < 60; i++ {
			s = append(s, rng.IntN(tk.VocabSize()))
		}
		seqs["prompt + random "+string(rune('0'+k))] = s
	}
	for name, ids := range seqs {
		for _, params := range []Params{InitialParams(), make(Params, NumParams), randomParams(rng, 3)} {
			lps := m.Score(params, ids)
			if len(lps) != len(ids) {
				t.Fatalf("%s: %d logprobs for %d tokens", name, len(lps), len(ids))
			}
			for i, lp := range lps {
				if !finite(lp) || lp > 1e-12 {
					t.Errorf("%s: position %d logprob %v", name, i, lp)
				}
			}
		}
	}
}

func randomParams(rng *rand.Rand, scale float64) Params {
	p := InitialParams()
	for i := range p {
		p[i] += scale * (2*rng.Float64() - 1)
	}
	return p
}

// TestNextTokenDistributionNormalised sums exp(logprob) over the whole
// vocabulary at several positions: a turn start, inside a search span,
// after the turn diverged from every candidate, at the end of a candidate,
// inside an answer after an information block, and before any turn.
func TestNextTokenDistributionNormalised(t *testing.T) {
	f := getFixture(t)
	tk, m := f.tk, f.model
	decide, query, answer := samplingContexts(t, f)
	params := InitialParams()
	prompt := tk.Encode(promptText(f.hotpot[2].Q, ""))
	tm, _ := turnModelFor(t, m, params, prompt)
	search := searchTurn(t, tm, rand.New(rand.NewPCG(2, 2)))
	// Inside a query, after its first word: the word may go on, or the
	// next word (or the end) may start.
	q := tm.search
	firstWord := concat(prompt, q.header, q.words[0].ids)
	cases := map[string][]int{
		"turn start":   prompt,
		"decide":       decide,
		"query":        query,
		"answer":       answer,
		"end of turn":  concat(prompt, search),
		"first word":   firstWord,
		"diverged":     concat(query, tk.Encode(" zzzz qqqq")),
		"before turns": tk.Encode(format.UserPrompt("What is it?", "")),
		"cut block":    cutBlockContext(t, f, f.hotpot[2].Q, 40),
		"closing it":   concat(cutBlockContext(t, f, f.hotpot[2].Q, 40), m.closeIDs[:2]),
	}
	V := tk.VocabSize()
	for name, ctx := range cases {
		seq := append(slices.Clone(ctx), 0)
		s := m.scorer(params, seq)
		sum := 0.0
		for x := 0; x < V; x++ {
			s.ids[len(ctx)] = x
			lp := s.logProb(len(ctx), nil, 0)
			if !finite(lp) {
				t.Fatalf("%s: token %d logprob %v", name, x, lp)
			}
			sum += math.Exp(lp)
		}
		if math.Abs(sum-1) > 1e-6 {
			t.Errorf("%s: next-token probabilities sum to %.12f, want 1", name, sum)
		}
	}
}

// TestGreedyIsArgmax checks that temperature 0 is deterministic (whatever
// the seed) and takes the most likely token at every step.
func TestGreedyIsArgmax(t *testing.T) {
	f := getFixture(t)
	m := f.model
	for qi := 0; qi < 5; qi++ {
		prompt := f.tk.Encode(promptText(f.hotpot[qi].Q, ""))
		for _, params := range []Params{InitialParams(), randomParams(rand.New(rand.NewPCG(uint64(qi), 1)), 2)} {
			sp := Sampling{Temperature: 0, MaxTokens: 200, Stop: format.StopStrings}
			g := m.Generate(params, prompt, sp, rand.New(rand.NewPCG(1, 1)))
			for seed := uint64(2); seed < 5; seed++ {
				g2 := m.Generate(params, prompt, sp, rand.New(rand.NewPCG(seed, seed)))
				if !slices.Equal(g.IDs, g2.IDs) {
					t.Fatalf("greedy differs between seeds: %q vs %q", g.Text, g2.Text)
				}
			}
			if g.FinishReason != "stop" {
				t.Errorf("greedy turn did not stop: %q", g.Text)
			}
			ctx := slices.Clone(prompt)
			for j, x := range g.IDs {
				tm, partial := turnModelFor(t, m, params, ctx)
				best := math.Inf(-1)
				for y := range tm.nextDist(partial) {
					best = math.Max(best, tm.logProb(partial, y, nil, 0))
				}
				if g.Logprobs[j] < best-1e-12 {
					t.Fatalf("step %d: greedy took %q (logprob %v), the best is %v", j, f.tk.Piece(x), g.Logprobs[j], best)
				}
				ctx = append(ctx, x)
			}
		}
	}
}

// gradSequence builds a multi-turn sequence: two search turns, each with
// its information block, an answer turn and the end-of-turn token, and
// returns it with the positions of the policy's tokens.
func gradSequence(t *testing.T, f *fixture, params Params, qi, searchPick, answerPick int, hint string) ([]int, []int) {
	t.Helper()
	tk := f.tk
	prompt := tk.Encode(promptText(f.hotpot[qi].Q, hint))
	tm, _ := turnModelFor(t, f.model, params, prompt)
	s := searchTurn(t, tm, rand.New(rand.NewPCG(uint64(qi), uint64(searchPick))))
	info := tk.Encode(format.InfoBlock(f.corpus[10*qi : 10*qi+3]))
	ctx := concat(prompt, s, info)
	// A second search, whose words may come from the passages just read
	// (titles, entities) and from the first search.
	tm2, _ := turnModelFor(t, f.model, params, ctx)
	s2 := searchTurn(t, tm2, rand.New(rand.NewPCG(uint64(qi), uint64(searchPick+1))))
	info2 := tk.Encode(format.InfoBlock(f.corpus[10*qi+3 : 10*qi+6]))
	ctx2 := concat(ctx, s2, info2)
	tm3, _ := turnModelFor(t, f.model, params, ctx2)
	answers := tm3.answers
	a := answers[answerPick%len(answers)]
	seq := concat(ctx2, a.ids, []int{f.model.eos})
	var pos []int
	for i := len(prompt); i < len(prompt)+len(s); i++ {
		pos = append(pos, i)
	}
	for i := len(ctx); i < len(ctx)+len(s2); i++ {
		pos = append(pos, i)
	}
	for i := len(ctx2); i < len(seq); i++ {
		pos = append(pos, i)
	}
	return seq, pos
}

// TestLogProbGradFiniteDifferences checks the analytic gradient of every
// token's logprob against central finite differences of Score, for every
// parameter, at the search and answer tokens of multi-turn sequences.
func TestLogProbGradFiniteDifferences(t *testing.T) {
	f := getFixture(t)
	m := f.model
	rng := rand.New(rand.NewPCG(9, 9))
	nonzero := make([]bool, NumParams)
	for k, c := range []struct {
		qi, s, a int
		hint     string
	}{{2, 0, 0, ""}, {12, 2, 5, "Hint: Search for \"Reading Post\" first.\n"}, {7, 1, 3, ""}, {30, 3, 1, ""}} {
		if k >= 2 && (raceEnabled || testing.Short()) {
			break
		}
		params := randomParams(rng, 1)
		if k == 0 {
			params = InitialParams()
		}
		seq, pos := gradSequence(t, f, params, c.qi, c.s, c.a, c.hint)
		const h = 1e-5
		fd := make([][]float64, NumParams) // fd[j][i]: d logp_i / d param j
		for j := range fd {
			pp, pm := slices.Clone(params), slices.Clone(params)
			pp[j] += h
			pm[j] -= h
			sp, sm := m.Score(pp, seq), m.Score(pm, seq)
			fd[j] = make([]float64, len(seq))
			for _, i := range pos {
				fd[j][i] = (sp[i] - sm[i]) / (2 * h)
			}
		}
		score := m.Score(params, seq)
		total := make([]float64, NumParams)
		coefs := make([]float64, len(pos))
		// Per-position gradients through one scorer (LogProbGrad's own
		// path, without rebuilding the turns for every position); the public
		// call is checked on their weighted sum below.
		s := m.scorer(params, seq)
		for n, i := range pos {
			grad := make([]float64, NumParams)
			lp := []float64{s.logProb(i, grad, 1)}
			if lp[0] != score[i] {
				t.Errorf("case %d position %d: LogProbGrad logprob %v, Score %v", k, i, lp[0], score[i])
			}
			coefs[n] = rng.NormFloat64()
			for j := range grad {
				if d := math.Abs(grad[j] - fd[j][i]); d > 1e-4*(math.Abs(grad[j])+math.Abs(fd[j][i]))+1e-7 {
					t.Errorf("case %d position %d (%q) param %s: gradient %v, finite difference %v",
						k, i, f.tk.Piece(seq[i]), ParamNames[j], grad[j], fd[j][i])
				}
				if grad[j] != 0 {
					nonzero[j] = true
				}
				total[j] += coefs[n] * grad[j]
			}
		}
		// The weighted call is the weighted sum of the single ones.
		grad := make([]float64, NumParams)
		lps := m.LogProbGrad(params, seq, pos, coefs, grad)
		for n, i := range pos {
			if lps[n] != score[i] {
				t.Errorf("case %d position %d: LogProbGrad logprob %v, Score %v", k, i, lps[n], score[i])
			}
		}
		for j := range grad {
			if math.Abs(grad[j]-total[j]) > 1e-9*(1+math.Abs(total[j])) {
				t.Errorf("case %d param %s: weighted gradient %v, sum of gradients %v", k, ParamNames[j], grad[j], total[j])
			}
		}
	}
	n := 0
	for _, nz := range nonzero {
		if nz {
			n++
		}
	}
	// Every parameter is checked somewhere (the short run has two cases).
	want := int(NumParams)
	if raceEnabled || testing.Short() {
		want -= 2
	}
	if n < want {
		t.Errorf("only %d of %d parameters have a non-zero gradient at the checked positions: %v", n, NumParams, nonzero)
	}
}

// FuzzModelScore checks that Score never panics and gives a finite
// logprob at every position, for any text after a real prompt and for any
// token ids.
func FuzzModelScore(f *testing.F) {
	f.Add("<think> I need more information. </think>\n<search> Lavatera </search>", []byte{1, 2, 3})
	f.Add(thoughtAnswer+"<answer> Oplismenus </answer><|im_end|>", []byte{})
	f.Add("\n\n<information>Doc 1(Title: \"Lavatera\") x</information>\n\n<|im_start|>assistant\n", []byte{255, 0, 255, 0})
	f.Add(InvalidActionText+"<search>", []byte("\x00\x01\x02\x03\x04\x05"))
	f.Fuzz(func(t *testing.T, text string, raw []byte) {
		fx := getFixture(t)
		ids := fx.tk.Encode(promptText(fx.hotpot[0].Q, "") + text)
		for i := 0; i+1 < len(raw); i += 2 {
			ids = append(ids, (int(raw[i])<<8|int(raw[i+1]))%fx.tk.VocabSize())
		}
		for i, lp := range fx.model.Score(InitialParams(), ids) {
			if !finite(lp) || lp > 1e-12 {
				t.Fatalf("position %d: logprob %v", i, lp)
			}
		}
	})
}
