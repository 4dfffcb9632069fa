package orchestrator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/hindsearch/hindsearch/clients/policy/tokenizer"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/sim"
)

// The policy model's tokenizer in this process (policy.tokenizer). Text in
// the sampled ids is located by the ids' exact bytes under it: vLLM's
// text_offset under return_tokens_as_token_ids counts the lengths of the
// "token_id:N" placeholder strings, not characters (PROTOCOLS.md §6), so no
// position is ever read from the server's offsets.

// tokenBytes gives the exact bytes of one token id; they may be part of a
// UTF-8 character. ok is false for an id the tokenizer does not have.
type tokenBytes interface {
	TokenBytes(id int) ([]byte, bool)
}

// encoder tokenizes plain text in this process (no chat template, no
// special tokens added), appending the ids to dst.
type encoder interface {
	AppendEncode(dst []int, text string) []int
}

// Vocab is what the program needs of a local tokenizer: each id's exact
// bytes, and encoding that gives the ids the policy server's POST /tokenize
// gives (with add_special_tokens false; doctor checks both). The Qwen
// tokenizer package and the simulator's tokenizer satisfy it.
type Vocab interface {
	tokenBytes
	encoder
}

// ChatTemplate renders chat messages as text the way the model's chat
// template does, followed by the generation prompt when
// addGenerationPrompt is set (policy.tokenize local encodes it).
type ChatTemplate func(msgs []policy.Message, addGenerationPrompt bool) string

// Tokenizer is the policy model's tokenizer, loaded in this process.
type Tokenizer struct {
	// Vocab gives each id's bytes and encodes text.
	Vocab Vocab
	// Chat renders the chat template (Qwen25Chat for a tokenizer file,
	// the simulator's template for its own tokenizer).
	Chat ChatTemplate
	// Source says where it came from: a file path (and how auto found
	// it), or the simulator's vocabulary.
	Source string
}

// TokenizerLoader loads a Hugging Face tokenizer.json file, or a gzip of
// one, for policy.tokenizer.
type TokenizerLoader func(path string) (Vocab, error)

// loadTokenizerFile is the TokenizerLoader Connect uses when given none
// (WithTokenizerLoader): a Hugging Face tokenizer.json (or a gzip of one)
// read by the Go tokenizer package.
func loadTokenizerFile(path string) (Vocab, error) {
	tk, err := tokenizer.Load(path)
	if err != nil {
		return nil, err
	}
	return tk, nil
}

// The Go tokenizer is a Vocab.
var _ Vocab = (*tokenizer.Tokenizer)(nil)

// Qwen25SystemPrompt is the system message Qwen2.5's chat template puts
// before a first message that is not a system message.
const Qwen25SystemPrompt = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

// Qwen25Chat is Qwen2.5's chat template without tools (the instruct
// models' tokenizer_config.json): a first message that is not a system
// message is preceded by "<|im_start|>system\n" Qwen25SystemPrompt
// "<|im_end|>\n"; each message is "<|im_start|>{role}\n{content}<|im_end|>\n";
// the generation prompt is "<|im_start|>assistant\n".
func Qwen25Chat(msgs []policy.Message, addGenerationPrompt bool) string {
	var b strings.Builder
	if len(msgs) == 0 || msgs[0].Role != "system" {
		b.WriteString("<|im_start|>system\n" + Qwen25SystemPrompt + "<|im_end|>\n")
	}
	for _, m := range msgs {
		b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String()
}

// simChat is the simulated policy's chat template (sim.ChatTemplate).
func simChat(msgs []policy.Message, addGenerationPrompt bool) string {
	ms := make([]sim.ChatMessage, len(msgs))
	for i, m := range msgs {
		ms[i] = sim.ChatMessage{Role: m.Role, Content: m.Content}
	}
	return sim.ChatTemplate(ms, addGenerationPrompt)
}

// simTokenizerSource is the Source of the simulator's tokenizer.
const simTokenizerSource = "the simulator's own tokenizer"

// simTokenizer wraps the simulator's tokenizer.
func simTokenizer(tk *sim.Tokenizer) *Tokenizer {
	return &Tokenizer{Vocab: tk, Chat: simChat, Source: simTokenizerSource}
}

// localTokenizer returns deps' tokenizer, or why there is none.
func (d Deps) localTokenizer() (*Tokenizer, error) {
	switch {
	case d.TokenizerErr != nil:
		return nil, d.TokenizerErr
	case d.Tokenizer == nil || d.Tokenizer.Vocab == nil:
		return nil, errors.New("policy.tokenizer: no local tokenizer (Deps.Tokenizer): the search span and token texts are located with it")
	}
	return d.Tokenizer, nil
}

// connectTokenizer resolves policy.tokenizer (see recipes.Policy.Tokenizer):
// auto with only embedded policies and sim are the simulator's tokenizer
// (emb when the simulator runs in this process, else built from the recipe
// as `orchestrate serve sim` does: Qwen2.5's); auto otherwise is policy.model's
// tokenizer.json in the Hugging Face cache; a file is loaded with load.
// note receives a line saying which file auto picked.
func connectTokenizer(r *recipes.Recipe, env map[string]string, emb *sim.Servers, load TokenizerLoader, note func(string)) (*Tokenizer, error) {
	embeddedOnly := true
	for _, u := range r.Policy.URLs {
		if u != recipes.Embedded {
			embeddedOnly = false
		}
	}
	name := r.Policy.Tokenizer
	switch {
	case name == recipes.TokenizerSim || name == recipes.TokenizerAuto && embeddedOnly:
		if emb != nil {
			return simTokenizer(emb.Model.Tokenizer()), nil
		}
		tk, err := sim.NewTokenizer()
		if err != nil {
			return nil, fmt.Errorf("policy.tokenizer %s: the simulator's tokenizer: %w", name, err)
		}
		return simTokenizer(tk), nil
	case name == recipes.TokenizerAuto:
		path, how, err := hfCacheTokenizer(r.Policy.Model, env)
		var te *tokenizerError
		if errors.As(err, &te) {
			return nil, &tokenizerError{"policy.tokenizer auto: " + te.what, te.fix}
		}
		if err != nil {
			return nil, fmt.Errorf("policy.tokenizer auto: %w", err)
		}
		v, err := load(path)
		if err != nil {
			return nil, fmt.Errorf("policy.tokenizer auto: %w", err)
		}
		note(fmt.Sprintf("policy.tokenizer auto: %s (%s)", path, how))
		return &Tokenizer{Vocab: v, Chat: Qwen25Chat, Source: path + " (" + how + ")"}, nil
	}
	v, err := load(name)
	if err != nil {
		return nil, fmt.Errorf("policy.tokenizer: %w", err)
	}
	return &Tokenizer{Vocab: v, Chat: Qwen25Chat, Source: name}, nil
}

// hfHubCache is the Hugging Face hub cache directory as huggingface_hub
// finds it (constants.py): HF_HUB_CACHE, else the legacy
// HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else
// XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
func hfHubCache(env map[string]string) string {
	for _, k := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if v := env[k]; v != "" {
			return expandHome(v, env)
		}
	}
	if v := env["HF_HOME"]; v != "" {
		return filepath.Join(expandHome(v, env), "hub")
	}
	if v := env["XDG_CACHE_HOME"]; v != "" {
		return filepath.Join(expandHome(v, env), "huggingface", "hub")
	}
	return filepath.Join(homeDir(env), ".cache", "huggingface", "hub")
}

// homeDir is HOME from env, else the user's home directory.
func homeDir(env map[string]string) string {
	if h := env["HOME"]; h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

// expandHome expands a leading ~ (huggingface_hub calls expanduser).
func expandHome(p string, env map[string]string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		return filepath.Join(homeDir(env), p[1:])
	}
	return p
}

// tokenizerError is a local tokenizer that cannot be had: what went wrong
// and what to do about it (doctor shows them apart).
type tokenizerError struct{ what, fix string }

func (e *tokenizerError) Error() string { return e.what + ": " + e.fix }

// hfCacheTokenizer finds model's tokenizer.json in the Hugging Face cache:
// models--ORG--NAME/snapshots/REV/tokenizer.json, REV being the revision
// refs/main names (what vLLM loads without --revision), else the only
// snapshot that has a tokenizer.json. how says which; the error names the
// path looked at and the fix.
func hfCacheTokenizer(model string, env map[string]string) (path, how string, err error) {
	repo := filepath.Join(hfHubCache(env), "models--"+strings.ReplaceAll(model, "/", "--"))
	snaps := filepath.Join(repo, "snapshots")
	fix := fmt.Sprintf("download it (huggingface-cli download %s tokenizer.json) or set policy.tokenizer to the tokenizer.json of the model the policy servers serve (policy servers started by `orchestrate serve sim`: policy.tokenizer: sim)", model)
	if ref, rerr := os.ReadFile(filepath.Join(repo, "refs", "main")); rerr == nil {
		rev := strings.TrimSpace(string(ref))
		p := filepath.Join(snaps, rev, "tokenizer.json")
		if _, serr := os.Stat(p); serr == nil {
			return p, "refs/main of the Hugging Face cache", nil
		}
		return "", "", &tokenizerError{fmt.Sprintf("no %s (refs/main names revision %s)", p, rev), fix}
	}
	ents, rerr := os.ReadDir(snaps)
	var found []string
	for _, e := range ents {
		p := filepath.Join(snaps, e.Name(), "tokenizer.json")
		if _, serr := os.Stat(p); e.IsDir() && serr == nil {
			found = append(found, p)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], "the only snapshot in the Hugging Face cache", nil
	case len(found) > 1:
		return "", "", &tokenizerError{fmt.Sprintf("%d snapshots of %s in %s have a tokenizer.json and %s has no refs/main", len(found), model, snaps, repo),
			fmt.Sprintf("set policy.tokenizer to the one the policy servers load (%s)", strings.Join(found, ", "))}
	case rerr != nil && !errors.Is(rerr, os.ErrNotExist):
		return "", "", fmt.Errorf("%s: %w", snaps, rerr)
	}
	return "", "", &tokenizerError{fmt.Sprintf("no %s in the Hugging Face cache (looked for %s)", model, filepath.Join(snaps, "*", "tokenizer.json")), fix}
}

// turnBytes appends the exact bytes of ids under tb to buf (an id tb does
// not have adds none).
func turnBytes(tb tokenBytes, ids []int, buf []byte) []byte {
	for _, id := range ids {
		b, _ := tb.TokenBytes(id)
		buf = append(buf, b...)
	}
	return buf
}

// searchTokenMask marks the sampled tokens ids of one turn that belong to
// its search span: the turn's first <search>...</search> action, tags
// included, found as format.ActionSpan finds it, in the ids' exact bytes
// under tb (never in the server's text offsets). A token belongs to the
// span when its bytes overlap it: the tokens of the tags count, and so
// does a token that straddles an end of the span, such as Qwen's ">\n\n"
// that ends "</search>" and runs past it. No token is marked when the
// bytes hold no search action first.
func searchTokenMask(tb tokenBytes, ids []int) []bool {
	mask := make([]bool, len(ids))
	buf := turnBytes(tb, ids, make([]byte, 0, 4*len(ids)))
	kind, _, start, end := format.ActionSpan(string(buf))
	if kind != format.ActionSearch {
		return mask
	}
	off := 0
	for j, id := range ids {
		if off >= end {
			break
		}
		b, _ := tb.TokenBytes(id)
		from, to := off, off+len(b)
		off = to
		mask[j] = to > start && from < end
	}
	return mask
}

// tokenPieces returns the text of each of t's tokens, for orchestrate
// show: a policy token's is the exact bytes of its id under tb, an
// environment token's "". Bytes are shown where they complete a UTF-8
// character: a character split over several tokens is shown whole on the
// token holding its last byte (the tokens before get ""), as a streaming
// detokenizer shows it, so that every piece is valid UTF-8 and the pieces
// of a turn concatenate to its text. A byte that can start no character,
// and the bytes of a character a turn ends inside, are shown as U+FFFD,
// one per byte (as the record's text is written).
func tokenPieces(tb tokenBytes, t *Trajectory) []string {
	pieces := make([]string, len(t.Tokens))
	var pending []byte // bytes of an unfinished character
	last := -1         // the policy token that added the last pending byte
	flush := func() {
		if len(pending) > 0 && last >= 0 {
			pieces[last] += strings.Repeat(string(utf8.RuneError), len(pending))
		}
		pending = pending[:0]
	}
	var b strings.Builder
	for i, id := range t.Tokens {
		if i >= len(t.Policy) || !t.Policy[i] {
			flush()
			continue
		}
		tok, _ := tb.TokenBytes(id)
		pending = append(pending, tok...)
		last = i
		b.Reset()
		k := 0
		for k < len(pending) && utf8.FullRune(pending[k:]) {
			r, size := utf8.DecodeRune(pending[k:])
			if r == utf8.RuneError && size == 1 {
				b.WriteRune(utf8.RuneError)
			} else {
				b.Write(pending[k : k+size])
			}
			k += size
		}
		pieces[i] = b.String()
		pending = append(pending[:0], pending[k:]...)
	}
	flush()
	return pieces
}
