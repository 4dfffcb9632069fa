package dataset

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// searchR1Columns are the top-level columns of a Search-R1 parquet file that
// the loader reads; any others (ability, FlashRAG's metadata, ...) are not
// decoded.
var searchR1Columns = []string{
	"data_source", "prompt", "reward_model", "extra_info",
	"id", "question", "golden_answers",
}

// loadSearchR1Parquet reads a Search-R1 parquet file, as written by its
// scripts/data_process/qa_search_*.py: columns data_source, prompt (a list
// of one {role, content} message: the instruction, then "Question: <q>\n"),
// reward_model {style, ground_truth {target: [gold answers]}} and
// extra_info {split, index}, and in some versions FlashRAG's own id,
// question and golden_answers.
//
// The question is the question column when present and not blank, else
// the text after the last "Question:" of prompt[0].content, trimmed. The
// golds are reward_model.ground_truth.target, or golden_answers when that
// has none; blank answers are dropped. The id is the id column, else
// "<data_source>-<split>-<index>". The dataset is data_source, else the
// file name without extension. Optional columns may be missing; a row with
// no question or no gold answer is an error naming the file, the row
// (0-based) and the field.
func loadSearchR1Parquet(path string) ([]Question, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	if st.Size() == 0 {
		return nil, fmt.Errorf("%s: empty file", path)
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("%s: not a parquet file: %w", path, err)
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	out, err := readSearchR1Rows(pf, path, name)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no questions", path)
	}
	return out, nil
}

// readSearchR1Rows decodes the rows of pf. Each row is reconstructed
// generically into a map[string]any (nested structs become maps, lists
// []any) over a schema projected onto searchR1Columns.
func readSearchR1Rows(pf *parquet.File, path, name string) (out []Question, err error) {
	// parquet-go panics on some malformed or unexpected schemas (a LIST
	// that is not a repeated group of one element, say).
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%s: reading parquet: %v", path, r)
		}
	}()

	proj := parquet.Group{}
	for _, fld := range pf.Schema().Fields() {
		for _, c := range searchR1Columns {
			if fld.Name() == c {
				proj[c] = fld
			}
		}
	}
	if len(proj) == 0 {
		return nil, fmt.Errorf("%s: no Search-R1 columns (prompt or question, reward_model or golden_answers)", path)
	}
	schema := parquet.NewSchema("search_r1", proj)
	r := parquet.NewReader(pf, schema)
	defer r.Close()

	rows := make([]parquet.Row, 128)
	index := 0
	for {
		n, rerr := r.ReadRows(rows)
		for _, row := range rows[:n] {
			m := map[string]any{}
			if err := schema.Reconstruct(&m, row); err != nil {
				return nil, fmt.Errorf("%s: row %d: %w", path, index, err)
			}
			q, err := searchR1Question(m, index, name)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			out = append(out, q)
			index++
		}
		if errors.Is(rerr, io.EOF) {
			return out, nil
		}
		if rerr != nil {
			return nil, fmt.Errorf("%s: row %d: %w", path, index, rerr)
		}
		if n == 0 {
			return out, nil
		}
	}
}

// searchR1Question maps one reconstructed row (number index, 0-based) to a
// Question. Errors start "row N: <field>: ".
func searchR1Question(m map[string]any, index int, name string) (Question, error) {
	rowErr := func(field, format string, args ...any) error {
		return fmt.Errorf("row %d: %s: %s", index, field, fmt.Sprintf(format, args...))
	}

	question, ok := scalarString(m["question"])
	if !ok || strings.TrimSpace(question) == "" {
		msgs, _ := listOf(m["prompt"])
		if len(msgs) == 0 {
			return Question{}, rowErr("prompt", "no message and no \"question\" column")
		}
		content, ok := scalarString(member(msgs[0], "content"))
		if !ok {
			return Question{}, rowErr("prompt[0].content", "missing")
		}
		i := strings.LastIndex(content, "Question:")
		if i < 0 {
			return Question{}, rowErr("prompt[0].content", "no \"Question:\"")
		}
		question = strings.TrimSpace(content[i+len("Question:"):])
		if question == "" {
			return Question{}, rowErr("prompt[0].content", "empty question after \"Question:\"")
		}
	}

	golds := nonBlank(stringList(member(member(m["reward_model"], "ground_truth"), "target")))
	if len(golds) == 0 {
		golds = nonBlank(stringList(m["golden_answers"]))
	}
	if len(golds) == 0 {
		return Question{}, rowErr("reward_model.ground_truth.target", "no gold answer")
	}

	ds, ok := scalarString(m["data_source"])
	if !ok || strings.TrimSpace(ds) == "" {
		ds = name
	}

	id, ok := scalarString(m["id"])
	if !ok || id == "" {
		split, hasSplit := scalarString(member(m["extra_info"], "split"))
		idx, hasIndex := scalarString(member(m["extra_info"], "index"))
		switch {
		case hasIndex && hasSplit && split != "":
			id = ds + "-" + split + "-" + idx
		case hasIndex:
			id = ds + "-" + idx
		default:
			id = ds + "-" + strconv.Itoa(index)
		}
	}
	return Question{ID: id, Question: question, Golds: golds, Dataset: ds}, nil
}

// member is the named field of a reconstructed struct, or nil.
func member(v any, name string) any {
	if m, ok := v.(map[string]any); ok {
		return m[name]
	}
	return nil
}

// listOf returns the elements of a reconstructed list. A LIST-annotated
// column reconstructs to []any directly; an unannotated three-level list
// (group {repeated group list {element}}) reconstructs to a one-key map of
// one-key maps, which is unwrapped here.
func listOf(v any) ([]any, bool) {
	switch v := v.(type) {
	case []any:
		return v, true
	case map[string]any:
		if len(v) != 1 {
			return nil, false
		}
		for _, inner := range v {
			elems, ok := inner.([]any)
			if !ok {
				return nil, false
			}
			out := make([]any, len(elems))
			for i, e := range elems {
				em, ok := e.(map[string]any)
				if !ok || len(em) != 1 {
					return nil, false
				}
				for _, x := range em {
					out[i] = x
				}
			}
			return out, true
		}
	}
	return nil, false
}

// stringList returns the strings of a reconstructed list of scalars; a
// single scalar counts as a list of one.
func stringList(v any) []string {
	if s, ok := scalarString(v); ok {
		return []string{s}
	}
	elems, _ := listOf(v)
	var out []string
	for _, e := range elems {
		if s, ok := scalarString(e); ok {
			out = append(out, s)
		}
	}
	return out
}

// scalarString renders a reconstructed scalar (string, bytes, integer) as a
// string; ok is false for nil and non-scalars.
func scalarString(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(v), true
	}
	return "", false
}

// nonBlank drops blank strings.
func nonBlank(ss []string) []string {
	var out []string
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			out = append(out, s)
		}
	}
	return out
}
