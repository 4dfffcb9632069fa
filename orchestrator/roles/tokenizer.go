package roles

import (
	"strings"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/tokenizer"
)

// The policy model's tokenizer in this process (policy.tokenizer). Text in
// the sampled ids is located by the ids' exact bytes under it: vLLM's
// text_offset under return_tokens_as_token_ids counts the lengths of the
// "token_id:N" placeholder strings, not characters (PROTOCOLS.md §6), so no
// position is ever read from the server's offsets.

// The Go tokenizer is a Vocab.
var _ Vocab = (*tokenizer.Tokenizer)(nil)

// IDBytes gives the exact bytes of one token id; they may be part of a
// UTF-8 character. ok is false for an id the tokenizer does not have.
type IDBytes interface {
	TokenBytes(id int) ([]byte, bool)
}

// Encoder tokenizes plain text in this process (no chat template, no
// special tokens added), appending the ids to dst.
type Encoder interface {
	AppendEncode(dst []int, text string) []int
}

// Vocab is what the program needs of a local tokenizer: each id's exact
// bytes, and encoding that gives the ids the policy server's POST /tokenize
// gives (with add_special_tokens false; doctor checks both). The Qwen
// tokenizer package and the simulator's tokenizer satisfy it.
type Vocab interface {
	IDBytes
	Encoder
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

// Qwen3Chat is Qwen3's chat template without tools, for system, user and
// generation-prompt turns (Qwen3's tokenizer_config.json, as
// tinker-cookbook's Qwen3Renderer reproduces it): no default system
// message; each message is "<|im_start|>{role}\n{content}<|im_end|>\n";
// the generation prompt is "<|im_start|>assistant\n" (thinking left on,
// the template's default, for the hybrid models).
func Qwen3Chat(msgs []policy.Message, addGenerationPrompt bool) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String()
}

// QwenEndTokens are the Qwen2.5 and Qwen3 instruct models' end-of-turn
// tokens (generation_config.json eos_token_id: <|im_end|>, <|endoftext|>).
var QwenEndTokens = []string{"<|im_end|>", "<|endoftext|>"}

// ChatFor returns the chat template of model, by its family, and false
// for a family whose template the program does not reproduce (only the
// Qwen2.5 and Qwen3 families are: a server with no tokenizer route, as
// Tinker, must never get an approximation).
func ChatFor(model string) (ChatTemplate, bool) {
	m := strings.ToLower(model)
	switch {
	case strings.Contains(m, "qwen3-"): // not Qwen3.5 and later, whose templates differ
		return Qwen3Chat, true
	case strings.Contains(m, "qwen2.5"):
		return Qwen25Chat, true
	}
	return nil, false
}

// SimTokenizerSource is the Source of the simulator's tokenizer.
const SimTokenizerSource = "the simulator's own tokenizer"

// TokenizerError is a local tokenizer that cannot be had: what went wrong
// and what to do about it (doctor shows them apart).
type TokenizerError struct {
	// What says what is missing or wrong, naming the path looked at.
	What string
	// Fix says what to do about it.
	Fix string
}

// Error is What and Fix on one line.
func (e *TokenizerError) Error() string { return e.What + ": " + e.Fix }

// TurnBytes appends the exact bytes of ids under tb to buf (an id tb does
// not have adds none).
func TurnBytes(tb IDBytes, ids []int, buf []byte) []byte {
	for _, id := range ids {
		b, _ := tb.TokenBytes(id)
		buf = append(buf, b...)
	}
	return buf
}
