package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/policy/tokenizer"
	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/fleet"
	"github.com/hindsearch/hindsearch/orchestrator/internal/testkit"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
)

// byteTokenizer is a small deterministic byte-level tokenizer standing in
// for Qwen's in the tests: ids 0-255 are the single bytes, then its
// vocabulary's pieces in order; AppendEncode takes the longest piece at
// each position. Like byte-level BPE its pieces may hold part of a UTF-8
// character, and "</search>\n\n" is "</" "search" ">\n\n".
type byteTokenizer struct {
	pieces  [][]byte
	ids     map[string]int
	longest int
}

func newByteTokenizer(vocab ...string) *byteTokenizer {
	t := &byteTokenizer{ids: map[string]int{}}
	for b := range 256 {
		t.pieces = append(t.pieces, []byte{byte(b)})
	}
	for _, p := range vocab {
		if _, ok := t.ids[p]; ok || len(p) < 2 {
			continue
		}
		t.ids[p] = len(t.pieces)
		t.pieces = append(t.pieces, []byte(p))
		t.longest = max(t.longest, len(p))
	}
	return t
}

func (t *byteTokenizer) TokenBytes(id int) ([]byte, bool) {
	if id < 0 || id >= len(t.pieces) {
		return nil, false
	}
	return t.pieces[id], true
}

func (t *byteTokenizer) AppendEncode(dst []int, text string) []int {
	for i := 0; i < len(text); {
		n := 1
		for l := min(t.longest, len(text)-i); l > 1; l-- {
			if _, ok := t.ids[text[i:i+l]]; ok {
				n = l
				break
			}
		}
		if n == 1 {
			dst = append(dst, int(text[i]))
		} else {
			dst = append(dst, t.ids[text[i:i+n]])
		}
		i += n
	}
	return dst
}

// spanTestTokenizer is the tokenizer of the search-span tests: Qwen2.5's
// own (the embedded copy of clients/policy/tokenizer), so the token
// boundaries are the ones a real Qwen2.5 policy samples.
func spanTestTokenizer(t *testing.T) roles.Vocab {
	t.Helper()
	tk, err := tokenizer.Qwen25()
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// byteTestTokenizer is a small deterministic byte-level vocabulary whose
// splits the tests choose (a character cut across two tokens, a token
// running past </search>).
func byteTestTokenizer() roles.Vocab {
	return newByteTokenizer(
		"<think>", "</think>", ">\n", "<search>", "</", "search", ">\n\n", "<answer>", "answer", ">",
		" Where", " was", " Zo\xc3", "\xab Sal", "da", "\xc3\xb1a", " born", "?", " caf\xc3\xa9", " \xe6\x9d", "\xb1\xe4\xba\xac",
		" S", "ão", " Paulo", "\n\n<information>", "</information>\n\n", "Doc", " 1", "(Title:", " \"", "\")",
		"<|im_start|>", "<|im_end|>", "system", "user", "assistant",
	)
}

// placeholderServer is a vLLM /v1/completions and /tokenize speaking
// server whose completions come from a script of turn texts: each turn's
// sampled ids are tk's encoding of its text, the answer's text is cut
// after the stop string it contains (vLLM's include_stop_str_in_output
// keeps the stop string; the token that holds its end, like ">\n\n", is
// kept whole), and text_offset follows vLLM's placeholder arithmetic
// under return_tokens_as_token_ids: the offset of token i is the sum of
// len("token_id:N") of the tokens before it.
type placeholderServer struct {
	tk    roles.Vocab
	chat  roles.ChatTemplate
	mu    sync.Mutex
	turns []string
	// tokenized counts the POST /tokenize requests.
	tokenized int
	srv       *httptest.Server
}

func newPlaceholderServer(t *testing.T, tk roles.Vocab, turns ...string) *placeholderServer {
	s := &placeholderServer{tk: tk, chat: roles.Qwen25Chat, turns: turns}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *placeholderServer) serve(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/tokenize":
		s.tokenized++
		var text string
		if msgs, ok := body["messages"].([]any); ok {
			var ms []policy.Message
			for _, m := range msgs {
				mm := m.(map[string]any)
				ms = append(ms, policy.Message{Role: mm["role"].(string), Content: mm["content"].(string)})
			}
			text = s.chat(ms, body["add_generation_prompt"] == true)
		} else {
			text, _ = body["prompt"].(string)
		}
		ids := s.tk.AppendEncode(nil, text)
		testkit.WriteJSON(w, http.StatusOK, map[string]any{"count": len(ids), "max_model_len": 4096, "tokens": ids})
	case "/v1/completions":
		if body["return_tokens_as_token_ids"] != true {
			http.Error(w, "want return_tokens_as_token_ids", http.StatusBadRequest)
			return
		}
		turn := "<answer> none </answer>"
		if len(s.turns) > 0 {
			turn, s.turns = s.turns[0], s.turns[1:]
		}
		ids := s.tk.AppendEncode(nil, turn)
		text, stop := turn, any(nil)
		for _, st := range []string{"</search>", "</answer>"} {
			if i := strings.Index(turn, st); i >= 0 {
				text, stop = turn[:i+len(st)], st
				break
			}
		}
		toks := make([]string, len(ids))
		lps := make([]float64, len(ids))
		offsets := make([]int, len(ids))
		off := 0
		for i, id := range ids {
			toks[i] = "token_id:" + strconv.Itoa(id)
			lps[i] = -0.1 * float64(i%7+1)
			offsets[i] = off
			off += len(toks[i])
		}
		testkit.WriteJSON(w, http.StatusOK, map[string]any{"choices": []any{map[string]any{"index": 0, "text": text,
			"finish_reason": "stop", "stop_reason": stop,
			"logprobs": map[string]any{"tokens": toks, "token_logprobs": lps, "text_offset": offsets}}}})
	default:
		http.NotFound(w, r)
	}
}

// The key test of issue 13: against a vLLM whose text_offset counts the
// "token_id:N" placeholders, the search-span mask is exactly the tokens of
// the turn's <search>...</search>, for a query with accented and CJK
// characters and a last token (">\n\n") that runs past "</search>" (the
// teacher then scores up to that token and no further:
// orchestrator's TestTeacherScoresUpToTheLastSearchToken); the kept
// per-token text is each id's exact bytes.
func TestSearchSpanIgnoresPlaceholderTextOffsets(t *testing.T) {
	t.Run("qwen2.5", func(t *testing.T) { checkSearchSpan(t, spanTestTokenizer(t)) })
	t.Run("bytes", func(t *testing.T) { checkSearchSpan(t, byteTestTokenizer()) })
}

// checkSearchSpan is TestSearchSpanIgnoresPlaceholderTextOffsets with
// tokenizer tk.
func checkSearchSpan(t *testing.T, tk roles.Vocab) {
	search := "<think> Where was Zoë Saldaña born? 東京?</think>\n<search> Zoë Saldaña 東京 café São Paulo </search>\n\n"
	answer := "<answer> São Paulo </answer>"
	srv := newPlaceholderServer(t, tk, search, answer)
	o := transport.DefaultOptions("policy", srv.srv.URL)
	o.Timeout, o.Retries = 5*time.Second, 0
	client, err := policy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	fr := &fakeRetriever{hits: []retriever.Hit{{ID: "1", Contents: "\"Zoe Saldana\"\nZoë Saldaña was born in Passaic."}}}
	r := &Engine{Replicas: fleet.New([]policy.Policy{client}), retriever: fr, topk: 3, maxTurns: 4, maxTurn: 500, maxObs: 500,
		maxCtx: 1 << 16, baseModel: "m", tok: &roles.Tokenizer{Vocab: tk, Chat: roles.Qwen25Chat}}
	ctx := context.Background()
	prompt, err := r.PromptIDs(ctx, "where was zoë saldaña born", "")
	if err != nil {
		t.Fatal(err)
	}
	tr := &Trajectory{ID: "t", PromptIDs: prompt, Question: dataset.Question{Question: "where was zoë saldaña born", Golds: []string{"Passaic"}}}
	if err := r.Rollout(ctx, tr, "m", policy.Neutral(), 1); err != nil {
		t.Fatal(err)
	}
	if len(tr.Turns) != 2 || tr.Turns[0].Action != format.ActionSearch || tr.Turns[0].Content != "Zoë Saldaña 東京 café São Paulo" {
		t.Fatalf("turns %+v", tr.Turns)
	}
	if !slices.Equal(fr.queries, []string{"Zoë Saldaña 東京 café São Paulo"}) {
		t.Fatalf("queries %q", fr.queries)
	}
	// Each turn's span covers its sampled ids, and its think tokens are
	// those whose bytes overlap "<think>...</think>".
	first := tk.AppendEncode(nil, search)
	if t0, t1 := tr.Turns[0], tr.Turns[1]; t0.From != 0 || t0.To != len(first) || t1.From <= t0.To || t1.To != len(tr.Tokens) {
		t.Errorf("turn spans [%d,%d) [%d,%d) of %d tokens, first turn %d", t0.From, t0.To, t1.From, t1.To, len(tr.Tokens), len(first))
	}
	thinkEnd := strings.Index(search, "</think>") + len("</think>")
	if want := len(tk.AppendEncode(nil, search[:thinkEnd])); tr.Turns[0].ThinkTokens != want || tr.Turns[1].ThinkTokens != 0 {
		t.Errorf("think tokens %d and %d, want %d and 0", tr.Turns[0].ThinkTokens, tr.Turns[1].ThinkTokens, want)
	}

	// The truth: the search turn's ids, their byte ranges, and the span
	// of "<search>...</search>" in the text the ids spell.
	ids := tk.AppendEncode(nil, search)
	if !slices.Equal(tr.Tokens[:len(ids)], ids) {
		t.Fatalf("the trajectory does not start with the search turn's ids")
	}
	start := strings.Index(search, "<search>")
	end := strings.Index(search, "</search>") + len("</search>")
	want := make([]bool, len(tr.Tokens))
	var spanBytes []byte
	off := 0
	lastSearch := -1
	for j, id := range ids {
		b, _ := tk.TokenBytes(id)
		if off+len(b) > start && off < end {
			want[j] = true
			spanBytes = append(spanBytes, b...)
			lastSearch = j
		}
		off += len(b)
	}
	if !slices.Equal(tr.Search, want) {
		t.Errorf("search mask\n%v\nwant\n%v", tr.Search, want)
	}
	if !bytes.Contains(spanBytes, []byte(search[start:end])) {
		t.Errorf("the marked tokens spell %q, which lacks %q", spanBytes, search[start:end])
	}
	// The fixture does what it should: the placeholder offsets would
	// have marked other tokens.
	offsets := placeholderOffsets(0, ids)
	var byOffsets []bool
	for j := range ids {
		from, to := offsets[j], len(tr.Turns[0].Text)
		if j+1 < len(ids) {
			to = offsets[j+1]
		}
		byOffsets = append(byOffsets, to > start && from < end)
	}
	if slices.Equal(byOffsets, want[:len(ids)]) {
		t.Fatal("fixture: the placeholder offsets give the true mask; the test shows nothing")
	}

	// The last search token is ">\n\n", past "</search>" (the turn's text
	// ends at the stop string), as Qwen2.5 tokenizes "</search>\n\n".
	if b, _ := tk.TokenBytes(ids[lastSearch]); string(b) != ">\n\n" || !strings.HasSuffix(tr.Turns[0].Text, "</search>") {
		t.Errorf("last search token %q, turn text %q", b, tr.Turns[0].Text)
	}

	// Kept per-token text: each policy token's exact bytes; a character
	// split over tokens on the token that completes it.
	pieces := TokenPieces(tk, tr)
	var got strings.Builder
	for j := range ids {
		got.WriteString(pieces[j])
	}
	if got.String() != search {
		t.Errorf("pieces of the search turn spell %q, want %q", got.String(), search)
	}
	for i, p := range pieces {
		if !tr.Policy[i] && p != "" {
			t.Errorf("environment token %d has piece %q", i, p)
		}
	}
	if _, ok := tk.(*byteTokenizer); ok {
		at := slices.Index(pieces, "\xb1\xe4\xba\xac")
		for j := range ids {
			if b, _ := tk.TokenBytes(ids[j]); string(b) == " \xe6\x9d" {
				if pieces[j] != " " || pieces[j+1] != "東京" {
					t.Errorf("split 東京: pieces %q %q", pieces[j], pieces[j+1])
				}
				break
			}
		}
		if at >= 0 {
			t.Errorf("a piece holds the raw tail of 東: %q", pieces[at])
		}
	}
}

// Per-token pieces: exact bytes, characters shown where they complete,
// bytes that complete none as U+FFFD, environment tokens "".
func TestTokenPieces(t *testing.T) {
	v := newPieceVocab()
	id := v.id
	tr := &Trajectory{
		Tokens: []int{id("<search> Zo"), 0xc3, id("\xab\xe6"), id("\x9d\xb1 x"), 7, 8, id(" a\xe4"), 0xff, id("\xba"), 9, 0xe4, 0xba},
		Policy: []bool{true, true, true, true, false, false, true, true, true, false, true, true},
	}
	got := TokenPieces(v, tr)
	// \xe4 then \xff: no character, one U+FFFD per byte, on the token
	// that showed it (\xff's); a lone continuation byte \xba: U+FFFD; the
	// last turn ends inside a character: one U+FFFD per byte, on its last
	// token.
	want := []string{"<search> Zo", "", "ë", "東 x", "", "", " a", "\ufffd\ufffd", "\ufffd", "", "", "\ufffd\ufffd"}
	if !slices.Equal(got, want) {
		t.Errorf("pieces %q\nwant   %q", got, want)
	}
}
