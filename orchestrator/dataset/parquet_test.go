package dataset

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/hindsearch/hindsearch/clients/policy/format"
)

// The structs below write Search-R1's parquet schema the way pyarrow does
// (datasets' to_parquet): every field optional, struct fields in the order
// of the Python dicts (not sorted), lists as three-level LIST groups
// (prompt.list.element, target.list.element).

type srMessage struct {
	Role    string `parquet:"role,optional"`
	Content string `parquet:"content,optional"`
}

type srGroundTruth struct {
	Target []string `parquet:"target,list,optional" parquet-element:",optional"`
}

type srRewardModel struct {
	Style       string         `parquet:"style,optional"`
	GroundTruth *srGroundTruth `parquet:"ground_truth,optional"`
}

type srExtraInfo struct {
	Split string `parquet:"split,optional"`
	Index *int64 `parquet:"index,optional"`
}

type srRow struct {
	DataSource  string         `parquet:"data_source,optional"`
	Prompt      []srMessage    `parquet:"prompt,list,optional" parquet-element:",optional"`
	Ability     string         `parquet:"ability,optional"`
	RewardModel *srRewardModel `parquet:"reward_model,optional"`
	ExtraInfo   *srExtraInfo   `parquet:"extra_info,optional"`
}

// srFlashRAGRow is the variant that keeps FlashRAG's id, question,
// golden_answers and metadata columns next to Search-R1's.
type srFlashRAGRow struct {
	ID            string         `parquet:"id,optional"`
	Question      string         `parquet:"question,optional"`
	GoldenAnswers []string       `parquet:"golden_answers,list,optional" parquet-element:",optional"`
	Metadata      *srMetadata    `parquet:"metadata,optional"`
	DataSource    string         `parquet:"data_source,optional"`
	Prompt        []srMessage    `parquet:"prompt,list,optional" parquet-element:",optional"`
	Ability       string         `parquet:"ability,optional"`
	RewardModel   *srRewardModel `parquet:"reward_model,optional"`
	ExtraInfo     *srExtraInfo   `parquet:"extra_info,optional"`
}

type srMetadata struct {
	Type   string   `parquet:"type,optional"`
	Titles []string `parquet:"titles,list,optional"`
}

// srLegacyRow writes target as an unannotated three-level list
// (target.list.item, no LIST logical type) and has no question column.
type srLegacyRow struct {
	DataSource  string       `parquet:"data_source,optional"`
	Prompt      []srMessage  `parquet:"prompt,list,optional" parquet-element:",optional"`
	RewardModel *srLegacyRM  `parquet:"reward_model,optional"`
	ExtraInfo   *srExtraInfo `parquet:"extra_info,optional"`
}

type srLegacyRM struct {
	GroundTruth *struct {
		Target *struct {
			List []struct {
				Item string `parquet:"item,optional"`
			} `parquet:"list"`
		} `parquet:"target,optional"`
	} `parquet:"ground_truth,optional"`
}

func writeParquet[T any](t *testing.T, name string, rows []T, opts ...parquet.WriterOption) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[T](f, opts...)
	if len(rows) > 0 {
		if _, err := w.Write(rows); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// srPrompt is Search-R1's user message for question q (already ending in "?").
func srPrompt(q string) []srMessage {
	return []srMessage{{Role: "user", Content: format.Instruction + "Question: " + q + "\n"}}
}

func srRM(targets ...string) *srRewardModel {
	return &srRewardModel{Style: "rule", GroundTruth: &srGroundTruth{Target: targets}}
}

func srExtra(split string, index int64) *srExtraInfo {
	return &srExtraInfo{Split: split, Index: &index}
}

func TestLoadSearchR1Parquet(t *testing.T) {
	rows := []srRow{
		{DataSource: "nq", Prompt: srPrompt("who wrote hamlet?"), Ability: "fact-reasoning",
			RewardModel: srRM("Shakespeare", " ", "William Shakespeare"), ExtraInfo: srExtra("train", 0)},
		{DataSource: "nq", Prompt: srPrompt("total number of death row inmates in the us?"), Ability: "fact-reasoning",
			RewardModel: srRM("2,718"), ExtraInfo: srExtra("train", 1)},
		{DataSource: "hotpotqa", Prompt: srPrompt("Question: which magazine was started first, Arthur's Magazine or First for Women?"), Ability: "fact-reasoning",
			RewardModel: srRM("Arthur's Magazine"), ExtraInfo: srExtra("train", 7)},
		{DataSource: "nq", Prompt: []srMessage{{Role: "user", Content: "Question:   spaced out?  \n\n"}},
			RewardModel: srRM("yes")},
	}
	p := writeParquet(t, "train.parquet", rows)
	qs, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Question{
		{ID: "nq-train-0", Question: "who wrote hamlet?", Golds: []string{"Shakespeare", "William Shakespeare"}, Dataset: "nq"},
		{ID: "nq-train-1", Question: "total number of death row inmates in the us?", Golds: []string{"2,718"}, Dataset: "nq"},
		// The text after the last "Question:".
		{ID: "hotpotqa-train-7", Question: "which magazine was started first, Arthur's Magazine or First for Women?", Golds: []string{"Arthur's Magazine"}, Dataset: "hotpotqa"},
		// No extra_info: the id falls back to the row number.
		{ID: "nq-3", Question: "spaced out?", Golds: []string{"yes"}, Dataset: "nq"},
	}
	if !reflect.DeepEqual(qs, want) {
		t.Errorf("Load:\n got %+v\nwant %+v", qs, want)
	}
	// The question round-trips through Search-R1's prompt.
	if got := format.UserPrompt(qs[0].Question, ""); got != rows[0].Prompt[0].Content {
		t.Errorf("UserPrompt(%q) = %q, want the file's prompt", qs[0].Question, got)
	}
}

func TestLoadSearchR1ParquetFlashRAGColumns(t *testing.T) {
	rows := []srFlashRAGRow{
		// The question and id columns win over prompt and extra_info.
		{ID: "train_0", Question: "who wrote hamlet", GoldenAnswers: []string{"ignored"},
			Metadata:   &srMetadata{Type: "bridge", Titles: []string{"a", "b"}},
			DataSource: "nq", Prompt: srPrompt("who wrote hamlet?"), RewardModel: srRM("Shakespeare"), ExtraInfo: srExtra("train", 0)},
		// Blank question column: the prompt's question; empty target: golden_answers.
		{ID: "train_5", Question: "  ", GoldenAnswers: []string{"", "Paris"},
			DataSource: "nq", Prompt: srPrompt("capital of france?"), RewardModel: srRM(), ExtraInfo: srExtra("train", 5)},
		// No id: data_source-split-index; no reward_model: golden_answers.
		{Question: "q3", GoldenAnswers: []string{"x", "y"}, DataSource: "triviaqa", ExtraInfo: srExtra("test", 9)},
		// No data_source: the file name.
		{ID: "t_4", Question: "q4", GoldenAnswers: []string{"z"}},
	}
	p := writeParquet(t, "mixed.parquet", rows)
	qs, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Question{
		{ID: "train_0", Question: "who wrote hamlet", Golds: []string{"Shakespeare"}, Dataset: "nq"},
		{ID: "train_5", Question: "capital of france?", Golds: []string{"Paris"}, Dataset: "nq"},
		{ID: "triviaqa-test-9", Question: "q3", Golds: []string{"x", "y"}, Dataset: "triviaqa"},
		{ID: "t_4", Question: "q4", Golds: []string{"z"}, Dataset: "mixed"},
	}
	if !reflect.DeepEqual(qs, want) {
		t.Errorf("Load:\n got %+v\nwant %+v", qs, want)
	}
}

func TestLoadSearchR1ParquetLegacyList(t *testing.T) {
	rm := func(targets ...string) *srLegacyRM {
		var r srLegacyRM
		r.GroundTruth = &struct {
			Target *struct {
				List []struct {
					Item string `parquet:"item,optional"`
				} `parquet:"list"`
			} `parquet:"target,optional"`
		}{}
		r.GroundTruth.Target = &struct {
			List []struct {
				Item string `parquet:"item,optional"`
			} `parquet:"list"`
		}{}
		for _, s := range targets {
			r.GroundTruth.Target.List = append(r.GroundTruth.Target.List, struct {
				Item string `parquet:"item,optional"`
			}{s})
		}
		return &r
	}
	var rows []srLegacyRow
	for i, q := range []string{"a?", "b?", "c?", "d?", "e?"} {
		rows = append(rows, srLegacyRow{DataSource: "nq", Prompt: srPrompt(q), RewardModel: rm(q+"1", q+"2"), ExtraInfo: srExtra("test", int64(i))})
	}
	// Two rows per row group: row numbers run on across row groups.
	p := writeParquet(t, "legacy.parquet", rows, parquet.MaxRowsPerRowGroup(2))
	qs, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 5 {
		t.Fatalf("got %d questions, want 5: %+v", len(qs), qs)
	}
	if want := (Question{ID: "nq-test-4", Question: "e?", Golds: []string{"e?1", "e?2"}, Dataset: "nq"}); !reflect.DeepEqual(qs[4], want) {
		t.Errorf("last question = %+v, want %+v", qs[4], want)
	}

	rows[3].RewardModel = rm()
	p = writeParquet(t, "legacy.parquet", rows, parquet.MaxRowsPerRowGroup(2))
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p+": row 3: reward_model.ground_truth.target: no gold answer") {
		t.Errorf("empty target in the second row group: %v", err)
	}
}

func TestLoadSearchR1ParquetErrors(t *testing.T) {
	ok := srRow{DataSource: "nq", Prompt: srPrompt("q?"), RewardModel: srRM("a"), ExtraInfo: srExtra("train", 0)}
	cases := []struct {
		name string
		bad  srRow
		want string
	}{
		{"empty target", srRow{DataSource: "nq", Prompt: srPrompt("q?"), RewardModel: srRM(), ExtraInfo: srExtra("train", 2)},
			": row 2: reward_model.ground_truth.target: no gold answer"},
		{"blank targets", srRow{DataSource: "nq", Prompt: srPrompt("q?"), RewardModel: srRM("", "  ")},
			": row 2: reward_model.ground_truth.target: no gold answer"},
		{"no reward_model", srRow{DataSource: "nq", Prompt: srPrompt("q?")},
			": row 2: reward_model.ground_truth.target: no gold answer"},
		{"no Question:", srRow{DataSource: "nq", Prompt: []srMessage{{Role: "user", Content: "who wrote hamlet?"}}, RewardModel: srRM("a")},
			`: row 2: prompt[0].content: no "Question:"`},
		{"empty question", srRow{DataSource: "nq", Prompt: []srMessage{{Role: "user", Content: format.Instruction + "Question: \n"}}, RewardModel: srRM("a")},
			`: row 2: prompt[0].content: empty question`},
		{"no prompt", srRow{DataSource: "nq", RewardModel: srRM("a")},
			": row 2: prompt: no message"},
	}
	for _, c := range cases {
		p := writeParquet(t, "train.parquet", []srRow{ok, ok, c.bad, ok})
		_, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), p+c.want) {
			t.Errorf("%s: Load error %v, want it to contain %q", c.name, err, p+c.want)
		}
	}

	// Not parquet, though named so.
	p := writeDataFile(t, "nq.parquet", "{\"question\": \"q\", \"golden_answers\": [\"a\"]}\n")
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p+": not a parquet file") {
		t.Errorf("JSONL named .parquet: %v", err)
	}
	p = writeDataFile(t, "short.parquet", "PAR1")
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p+": not a parquet file") {
		t.Errorf("truncated parquet: %v", err)
	}
	p = writeDataFile(t, "empty.parquet", "")
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p+": empty file") {
		t.Errorf("empty file: %v", err)
	}
	p = writeParquet[srRow](t, "norows.parquet", nil)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p+": no questions") {
		t.Errorf("parquet with no rows: %v", err)
	}
	type other struct {
		A string `parquet:"a"`
	}
	p = writeParquet(t, "other.parquet", []other{{"x"}})
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p+": no Search-R1 columns") {
		t.Errorf("parquet with other columns: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "missing.parquet")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
}

func TestLoadQuestionsDispatch(t *testing.T) {
	// Upper-case extension: parquet.
	p := writeParquet(t, "TEST.PARQUET", []srRow{{DataSource: "nq", Prompt: srPrompt("q?"), RewardModel: srRM("a"), ExtraInfo: srExtra("test", 3)}})
	qs, err := Load(p)
	if err != nil || len(qs) != 1 || qs[0].ID != "nq-test-3" {
		t.Errorf("Load(%s) = %+v, %v", p, qs, err)
	}
	// Anything else: JSONL, as shipped.
	qs, err = Load("../../recipes/data/qa/nq.jsonl")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("no shipped nq.jsonl")
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) == 0 || qs[0].Dataset != "nq" || qs[0].Question == "" || len(qs[0].Golds) == 0 {
		t.Errorf("shipped nq.jsonl: %d questions, first %+v", len(qs), qs)
	}
}
