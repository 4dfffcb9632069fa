package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runTokenizeCLI runs "orchestrate tokenize args..." on a fresh command tree
// with stdin as its standard input.
func runTokenizeCLI(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRootCmd(&stdout, &stderr, nil)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"tokenize"}, args...))
	err := root.Execute()
	return stdout.String(), stderr.String(), err
}

func TestTokenizeEncodesLines(t *testing.T) {
	in := `"<|im_start|>user\nWho wrote Ode to Joy?<|im_end|>\n"` + "\n" + `"</search>\n\n"` + "\n" + `""`
	out, stderr, err := runTokenizeCLI(t, in)
	if err != nil {
		t.Fatalf("tokenize: %v (stderr %q)", err, stderr)
	}
	want := "[151644,872,198,15191,6139,506,450,311,27138,30,151645,198]\n[522,1836,1339]\n[]\n"
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
}

func TestTokenizeDecode(t *testing.T) {
	out, stderr, err := runTokenizeCLI(t, "[9707,1879]\n[522,1836,1339]\n", "--decode")
	if err != nil || stderr != "" {
		t.Fatalf("tokenize --decode: %v (stderr %q)", err, stderr)
	}
	if want := `"Hello world"` + "\n" + `"</search>\n\n"` + "\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
}

// TestTokenizeDecodePartialCharacterWarns: " 北" is " \xe5\x8c" + "\x97";
// the first id alone decodes to a partial character, written as U+FFFD with
// a warning naming the line.
func TestTokenizeDecodePartialCharacterWarns(t *testing.T) {
	out, stderr, err := runTokenizeCLI(t, "[94305,245]\n[94305]\n", "--decode")
	if err != nil {
		t.Fatal(err)
	}
	if want := `" 北"` + "\n" + `" \ufffd\ufffd"` + "\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	if !strings.Contains(stderr, "line 2:") || !strings.Contains(stderr, "U+FFFD") || strings.Contains(stderr, "line 1:") {
		t.Errorf("stderr %q, want one warning naming line 2", stderr)
	}
}

func TestTokenizePieces(t *testing.T) {
	out, _, err := runTokenizeCLI(t, `"<|im_start|> 北"`+"\n[1339]\n", "--pieces")
	if err != nil {
		t.Fatal(err)
	}
	want := "151644\t\"<|im_start|>\"\n94305\t\" \\xe5\\x8c\"\n245\t\"\\x97\"\n\n1339\t\">\\n\\n\"\n\n"
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
}

func TestTokenizeTokenizerFile(t *testing.T) {
	// The embedded file itself, given as a path (gzip, detected by content).
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	data, err := os.ReadFile("../../clients/policy/tokenizer/qwen2.5/tokenizer.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runTokenizeCLI(t, `"Hello world"`+"\n", "--tokenizer", path)
	if err != nil || out != "[9707,1879]\n" {
		t.Errorf("tokenize --tokenizer FILE: %q, %v", out, err)
	}
	if _, _, err := runTokenizeCLI(t, `"x"`+"\n", "--tokenizer", filepath.Join(t.TempDir(), "none.json")); err == nil || !strings.Contains(err.Error(), "none.json") {
		t.Errorf("a missing tokenizer file: err %v, want one naming it", err)
	}
}

func TestTokenizeErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct {
		name, in string
		args     []string
		want     string
	}{
		{"text not JSON", "\"ok\"\nplain text\n", nil, `line 2: want a JSON string, got "plain text"`},
		{"empty line", "\"ok\"\n\n", nil, "line 2: want a JSON string, got an empty line"},
		{"bad string", "\"ok\"\n\"unterminated\n", nil, "line 2: want a JSON string:"},
		{"ids not array", "[1]\n\"text\"\n", []string{"--decode"}, "line 2: want a JSON array of ids"},
		{"unknown id", "[1]\n[1,999999]\n", []string{"--decode"}, "line 2: token 999999 (index 1) is not in the vocabulary"},
		{"unknown id pieces", "[5,-3]\n", []string{"--pieces"}, "line 1: token -3 (index 1)"},
		{"both modes", "", []string{"--decode", "--pieces"}, "exclude each other"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := runTokenizeCLI(t, c.in, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want one containing %q", err, c.want)
			}
		})
	}
}
