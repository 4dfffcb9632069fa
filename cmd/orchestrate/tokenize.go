package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/clients/policy/tokenizer"
)

// tokenizeFlags are the flags of the tokenize subcommand.
type tokenizeFlags struct {
	tokenizer string
	decode    bool
	pieces    bool
}

func newTokenizeCmd(e *env) *cobra.Command {
	var f tokenizeFlags
	cmd := &cobra.Command{
		Use:   "tokenize",
		Short: "Encode text to token ids, decode ids, or print each token's exact bytes: what the agent sees",
		Long: `Read one JSON value per line on standard input and write one line per input:

  (default)  a JSON string of text -> a JSON array of its ids, as Hugging
             Face tokenizers' encode(text, add_special_tokens=False) gives
             them (added tokens such as <|im_start|> are matched in the text)
  --decode   a JSON array of ids -> a JSON string of their bytes. When the
             ids end or start inside a UTF-8 character (a token may hold part
             of one), each invalid byte is written as U+FFFD and a warning
             naming the line goes to standard error; --pieces shows the exact
             bytes
  --pieces   a JSON string of text, or a JSON array of ids -> one line per
             token, its id, a tab and its exact bytes quoted as Go's %q
             quotes them ("\xe4\xb8" for part of a character), then an empty
             line

--tokenizer is a tokenizer.json file (plain or gzip-compressed), qwen2.5
(the default: Qwen2.5's tokenizer, built into the binary) or qwen3 (Qwen3's:
Qwen2.5's with <think>, </think>, <tool_response>, </tool_response> as one
id each). An input line
that is not what the mode takes is an error naming the line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTokenize(e, f, cmd.InOrStdin())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.tokenizer, "tokenizer", "qwen2.5", "tokenizer.json file (plain or .gz), or qwen2.5 or qwen3 for a built-in tokenizer")
	fs.BoolVar(&f.decode, "decode", false, "read JSON arrays of ids, write JSON strings")
	fs.BoolVar(&f.pieces, "pieces", false, "write each token's id and exact bytes")
	return cmd
}

func loadTokenizer(name string) (*tokenizer.Tokenizer, error) {
	switch name {
	case "", "qwen2.5":
		return tokenizer.Qwen25()
	case "qwen3":
		return tokenizer.Qwen3()
	}
	return tokenizer.Load(name)
}

func runTokenize(e *env, f tokenizeFlags, stdin io.Reader) error {
	if f.decode && f.pieces {
		return errors.New("tokenize: --decode and --pieces exclude each other")
	}
	tok, err := loadTokenizer(f.tokenizer)
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	in := bufio.NewReaderSize(stdin, 1<<16)
	out := bufio.NewWriter(e.stdout)
	jsonOut := json.NewEncoder(out)
	jsonOut.SetEscapeHTML(false) // "</search>", not "\u003c/search\u003e"
	var ids []int
	var buf []byte
	for n := 1; ; n++ {
		line, err := in.ReadBytes('\n')
		if len(line) == 0 && err == io.EOF {
			break
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("tokenize: reading line %d: %w", n, err)
		}
		line = bytes.TrimSpace(line)
		switch {
		case f.decode:
			if ids, err = parseIDs(line); err != nil {
				return fmt.Errorf("tokenize: line %d: %w", n, err)
			}
			if buf, err = tok.AppendDecode(buf[:0], ids); err != nil {
				return fmt.Errorf("tokenize: line %d: %w", n, err)
			}
			if !utf8.Valid(buf) {
				fmt.Fprintf(e.stderr, "tokenize: line %d: the ids' bytes are not valid UTF-8 (a token holds part of a character); invalid bytes written as U+FFFD (--pieces shows them)\n", n)
			}
			// The encoder writes each invalid byte as U+FFFD, and a newline.
			if err := jsonOut.Encode(string(buf)); err != nil {
				return fmt.Errorf("tokenize: %w", err)
			}
		case f.pieces:
			if len(line) > 0 && line[0] == '[' {
				ids, err = parseIDs(line)
			} else {
				var text string
				if text, err = parseText(line); err == nil {
					ids = tok.AppendEncode(ids[:0], text)
				}
			}
			if err != nil {
				return fmt.Errorf("tokenize: line %d: %w", n, err)
			}
			for i, id := range ids {
				b, ok := tok.TokenBytes(id)
				if !ok {
					return fmt.Errorf("tokenize: line %d: token %d (index %d) is not in the vocabulary of %d ids", n, id, i, tok.VocabSize())
				}
				fmt.Fprintf(out, "%d\t%s\n", id, strconv.Quote(string(b)))
			}
			out.WriteByte('\n')
		default:
			text, err := parseText(line)
			if err != nil {
				return fmt.Errorf("tokenize: line %d: %w", n, err)
			}
			ids = tok.AppendEncode(ids[:0], text)
			buf = append(buf[:0], '[')
			for i, id := range ids {
				if i > 0 {
					buf = append(buf, ',')
				}
				buf = strconv.AppendInt(buf, int64(id), 10)
			}
			buf = append(buf, ']', '\n')
			out.Write(buf)
		}
		// Flush when no more input is waiting, so that a line typed in
		// answers at once and a piped file is written in big blocks.
		if in.Buffered() == 0 {
			if err := out.Flush(); err != nil {
				return fmt.Errorf("tokenize: %w", err)
			}
		}
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	return nil
}

func parseText(line []byte) (string, error) {
	var s string
	if len(line) == 0 || line[0] != '"' {
		return "", fmt.Errorf("want a JSON string, got %s", start(line))
	}
	if err := json.Unmarshal(line, &s); err != nil {
		return "", fmt.Errorf("want a JSON string: %w", err)
	}
	return s, nil
}

func parseIDs(line []byte) ([]int, error) {
	var ids []int
	if len(line) == 0 || line[0] != '[' {
		return nil, fmt.Errorf("want a JSON array of ids, got %s", start(line))
	}
	if err := json.Unmarshal(line, &ids); err != nil {
		return nil, fmt.Errorf("want a JSON array of ids: %w", err)
	}
	return ids, nil
}

// start is the beginning of an input line, for error messages.
func start(line []byte) string {
	if len(line) == 0 {
		return "an empty line"
	}
	if len(line) > 40 {
		return strconv.Quote(string(line[:40])) + "..."
	}
	return strconv.Quote(string(line))
}
