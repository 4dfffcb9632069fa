package setup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hindsearch/hindsearch/clients/hub"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/tokenizer"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/sim"
	"github.com/hindsearch/hindsearch/sim/lm"
)

// TokenizerLoader loads a Hugging Face tokenizer.json file, or a gzip of
// one, for policy.tokenizer.
type TokenizerLoader func(path string) (roles.Vocab, error)

// loadTokenizerFile is the TokenizerLoader Connect uses when given none
// (WithTokenizerLoader): a Hugging Face tokenizer.json (or a gzip of one)
// read by the Go tokenizer package.
func loadTokenizerFile(path string) (roles.Vocab, error) {
	tk, err := tokenizer.Load(path)
	if err != nil {
		return nil, err
	}
	return tk, nil
}

// simChat is the simulated policy's chat template (lm.ChatTemplate).
func simChat(msgs []policy.Message, addGenerationPrompt bool) string {
	ms := make([]lm.ChatMessage, len(msgs))
	for i, m := range msgs {
		ms[i] = lm.ChatMessage{Role: m.Role, Content: m.Content}
	}
	return lm.ChatTemplate(ms, addGenerationPrompt)
}

// simTokenizer wraps the simulator's tokenizer.
func simTokenizer(tk *lm.Tokenizer) *roles.Tokenizer {
	return &roles.Tokenizer{Vocab: tk, Chat: simChat, Source: roles.SimTokenizerSource}
}

// connectTokenizer resolves policy.tokenizer (see recipes.Policy.Tokenizer):
// auto with only embedded policies and sim are the simulator's tokenizer
// (emb when the simulator runs in this process, else built from the recipe
// as `orchestrate serve sim` does: Qwen2.5's); auto otherwise is policy.model's
// tokenizer.json in the Hugging Face cache; a file is loaded with load.
// note receives a line saying which file auto picked.
func connectTokenizer(r *recipes.Recipe, env map[string]string, emb *sim.Servers, load TokenizerLoader, note func(string)) (*roles.Tokenizer, error) {
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
		tk, err := lm.NewTokenizer()
		if err != nil {
			return nil, fmt.Errorf("policy.tokenizer %s: the simulator's tokenizer: %w", name, err)
		}
		return simTokenizer(tk), nil
	}
	chat, known := roles.ChatFor(r.Policy.Model)
	if !known {
		if r.Policy.Server == recipes.ServerTinker {
			// No tokenizer route to check a guess against.
			return nil, &roles.TokenizerError{What: fmt.Sprintf("policy.model %q: the program reproduces the tokenizer and chat template of the Qwen2.5 and Qwen3 families only, and a Tinker server has no tokenizer route to check another against", r.Policy.Model),
				Fix: "use a Qwen2.5 or Qwen3 model, or serve the model with vLLM (policy.server vllm), whose /tokenize applies its own template"}
		}
		chat = roles.Qwen25Chat
	}
	switch {
	case name == recipes.TokenizerQwen25 || name == recipes.TokenizerQwen3:
		return builtinTokenizer(name, chat)
	case name == recipes.TokenizerAuto:
		path, how, err := hfCacheTokenizer(r.Policy.Model, env)
		var te *roles.TokenizerError
		if errors.As(err, &te) {
			return nil, &roles.TokenizerError{What: "policy.tokenizer auto: " + te.What, Fix: te.Fix}
		}
		if err != nil {
			return nil, fmt.Errorf("policy.tokenizer auto: %w", err)
		}
		v, err := load(path)
		if err != nil {
			return nil, fmt.Errorf("policy.tokenizer auto: %w", err)
		}
		note(fmt.Sprintf("policy.tokenizer auto: %s (%s)", path, how))
		return &roles.Tokenizer{Vocab: v, Chat: chat, Source: path + " (" + how + ")"}, nil
	}
	v, err := load(name)
	if err != nil {
		return nil, fmt.Errorf("policy.tokenizer: %w", err)
	}
	return &roles.Tokenizer{Vocab: v, Chat: chat, Source: name}, nil
}

// hfCacheTokenizer finds model's tokenizer.json in the Hugging Face cache:
// models--ORG--NAME/snapshots/REV/tokenizer.json, REV being the revision
// refs/main names (what vLLM loads without --revision), else the only
// snapshot that has a tokenizer.json. how says which; the error names the
// path looked at and the fix.
func hfCacheTokenizer(model string, env map[string]string) (path, how string, err error) {
	repo := filepath.Join(hub.Cache(env), "models--"+strings.ReplaceAll(model, "/", "--"))
	snaps := filepath.Join(repo, "snapshots")
	fix := fmt.Sprintf("download it (huggingface-cli download %s tokenizer.json) or set policy.tokenizer to the tokenizer.json of the model the policy servers serve (policy servers started by `orchestrate serve sim`: policy.tokenizer: sim)", model)
	if ref, rerr := os.ReadFile(filepath.Join(repo, "refs", "main")); rerr == nil {
		rev := strings.TrimSpace(string(ref))
		p := filepath.Join(snaps, rev, "tokenizer.json")
		if _, serr := os.Stat(p); serr == nil {
			return p, "refs/main of the Hugging Face cache", nil
		}
		return "", "", &roles.TokenizerError{What: fmt.Sprintf("no %s (refs/main names revision %s)", p, rev), Fix: fix}
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
		return "", "", &roles.TokenizerError{What: fmt.Sprintf("%d snapshots of %s in %s have a tokenizer.json and %s has no refs/main", len(found), model, snaps, repo),
			Fix: fmt.Sprintf("set policy.tokenizer to the one the policy servers load (%s)", strings.Join(found, ", "))}
	case rerr != nil && !errors.Is(rerr, os.ErrNotExist):
		return "", "", fmt.Errorf("%s: %w", snaps, rerr)
	}
	return "", "", &roles.TokenizerError{What: fmt.Sprintf("no %s in the Hugging Face cache (looked for %s)", model, filepath.Join(snaps, "*", "tokenizer.json")), Fix: fix}
}

// ResolveTokenizer resolves policy.tokenizer as Connect does when no
// simulator runs in this process (auto and sim build the simulator's
// tokenizer from the recipe, as `orchestrate serve sim` does), loading a
// file with load (nil: the built-in loader); note receives the line
// saying which file auto picked. environ is KEY=VALUE pairs (HOME and the
// Hugging Face cache variables are read from it).
func ResolveTokenizer(r *recipes.Recipe, environ []string, load TokenizerLoader, note func(string)) (*roles.Tokenizer, error) {
	if load == nil {
		load = loadTokenizerFile
	}
	if note == nil {
		note = func(string) {}
	}
	return connectTokenizer(r, recipes.EnvMap(environ), nil, load, note)
}

// builtinTokenizer is policy.tokenizer (or judge.tokenizer) qwen2.5 or
// qwen3: the program's own copy of that family's tokenizer
// (clients/policy/tokenizer).
func builtinTokenizer(name string, chat roles.ChatTemplate) (*roles.Tokenizer, error) {
	load := tokenizer.Qwen25
	if name == recipes.TokenizerQwen3 {
		load = tokenizer.Qwen3
	}
	tk, err := load()
	if err != nil {
		return nil, err
	}
	return &roles.Tokenizer{Vocab: tk, Chat: chat, Source: "the built-in " + name + " tokenizer"}, nil
}
