package bm25

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// answer is one HTTP answer of the handler.
type answer struct {
	status int
	ctype  string
	body   string
}

// send sends body to h as JSON (ctype "" for no Content-Type header).
func send(t *testing.T, h http.Handler, method, path, ctype, body string) answer {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
}

// post sends a JSON /retrieve body.
func post(t *testing.T, h http.Handler, body string) answer {
	t.Helper()
	return send(t, h, "POST", "/retrieve", "application/json", body)
}

// num encodes a float as encoding/json does.
func num(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// wantJSON fails unless a is 200 application/json with body want.
func wantJSON(t *testing.T, what string, a answer, status int, want string) {
	t.Helper()
	if a.status != status || a.ctype != "application/json" || a.body != want {
		t.Errorf("%s: %d %s\n got %s\nwant %d application/json %s", what, a.status, a.ctype, a.body, status, want)
	}
}

// wantInternalError fails unless a is Starlette's answer to an unhandled
// exception.
func wantInternalError(t *testing.T, what string, a answer) {
	t.Helper()
	if a.status != 500 || a.ctype != "text/plain; charset=utf-8" || a.body != "Internal Server Error" {
		t.Errorf("%s: %d %q %q, want 500 text/plain \"Internal Server Error\"", what, a.status, a.ctype, a.body)
	}
}

func TestHandlerDenseStyleServesCorpusRows(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, append(animals, passage("h", "<b>&", "html <b> & zebra"))...), t.TempDir())
	h := ix.Handler(StyleDense)
	res, err := ix.Search(context.Background(), []string{"zebra", "html"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	z, tg, hh := res[0][0], res[0][1], res[1][0]
	if z.ID != "z" || tg.ID != "t" || hh.ID != "h" || len(res[1]) != 1 {
		t.Fatalf("unexpected hits %v", res)
	}
	want := `{"result":[[` +
		`{"document":{"id":"z","contents":"\"Zebra\"\nzebra zebra lion"},"score":` + num(z.Score) + `},` +
		`{"document":{"id":"t","contents":"\"Tiger\"\ntiger zebra"},"score":` + num(tg.Score) + `}],` +
		`[{"document":{"id":"h","contents":"\"<b>&\"\nhtml <b> & zebra"},"score":` + num(hh.Score) + `}],` +
		`[]]}`
	wantJSON(t, "dense", post(t, h, `{"queries": ["zebra", "html", ""], "topk": 2, "return_scores": true}`), 200, want)
	wantJSON(t, "no queries", post(t, h, `{"queries": [], "topk": 3, "return_scores": true}`), 200, `{"result":[]}`)
}

// Search-R1's BM25 retriever over a pyserini index storing the raw
// documents answers {title, text, contents} and no id: title is the first
// line with its quotes stripped, text the lines after it.
func TestHandlerBM25StyleServesTitleTextContentsWithoutID(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, append(animals,
		`{"id":"q","contents":"\"\"Quoted\" zebra\"\nline one\nline two"}`,
		`{"id":"n","contents":"\"No text zebra\""}`)...), t.TempDir())
	h := ix.Handler(StyleBM25)
	res, err := ix.Search(context.Background(), []string{"zebra"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(res[0]); strings.Join(got, ",") != "z,n,t,q" {
		t.Fatalf("hits %v", got)
	}
	s := func(i int) string { return num(res[0][i].Score) }
	want := `{"result":[[` +
		`{"document":{"title":"Zebra","text":"zebra zebra lion","contents":"\"Zebra\"\nzebra zebra lion"},"score":` + s(0) + `},` +
		`{"document":{"title":"No text zebra","text":"","contents":"\"No text zebra\""},"score":` + s(1) + `},` +
		`{"document":{"title":"Tiger","text":"tiger zebra","contents":"\"Tiger\"\ntiger zebra"},"score":` + s(2) + `},` +
		`{"document":{"title":"Quoted\" zebra","text":"line one\nline two","contents":"\"\"Quoted\" zebra\"\nline one\nline two"},"score":` + s(3) + `}]]}`
	wantJSON(t, "bm25", post(t, h, `{"queries": ["zebra"], "topk": 4, "return_scores": true}`), 200, want)
}

// The reference server unpacks the per-query lists into (results,
// scores) when return_scores is false: any number of queries but two
// fails with Starlette's plain 500.
func TestHandlerWithoutReturnScoresIs500(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, animals...), t.TempDir())
	for _, style := range []Style{StyleDense, StyleBM25} {
		h := ix.Handler(style)
		for _, body := range []string{
			`{"queries": ["zebra"], "topk": 2}`,
			`{"queries": ["zebra"], "topk": 2, "return_scores": false}`,
			`{"queries": [], "topk": 2}`,
			`{"queries": ["zebra", "lion", "tiger"], "topk": 2, "return_scores": 0}`,
		} {
			wantInternalError(t, string(style)+" "+body, post(t, h, body))
		}
	}
}

// With exactly two queries the unpacking succeeds: "results" is the first
// query's list and each of its documents becomes one bare entry.
func TestHandlerWithoutReturnScoresTwoQueriesAnswersFirstQueryDocumentsBare(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, animals...), t.TempDir())
	wantJSON(t, "dense", post(t, ix.Handler(StyleDense), `{"queries": ["zebra", "hawk"], "topk": 2}`), 200,
		`{"result":[{"id":"z","contents":"\"Zebra\"\nzebra zebra lion"},{"id":"t","contents":"\"Tiger\"\ntiger zebra"}]}`)
	wantJSON(t, "bm25", post(t, ix.Handler(StyleBM25), `{"queries": ["zebra", "hawk"], "topk": 1, "return_scores": "no"}`), 200,
		`{"result":[{"title":"Zebra","text":"zebra zebra lion","contents":"\"Zebra\"\nzebra zebra lion"}]}`)
}

// A topk that is missing, null or 0 is retrieval_server.py's --topk
// default, 3.
func TestHandlerTopKOmittedNullOrZeroIsDefault3(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, animals...), t.TempDir())
	h := ix.Handler(StyleDense)
	for _, body := range []string{
		`{"queries": ["zebra lion tiger hawk"], "return_scores": true}`,
		`{"queries": ["zebra lion tiger hawk"], "topk": null, "return_scores": true}`,
		`{"queries": ["zebra lion tiger hawk"], "topk": 0, "return_scores": true, "extra": 1}`,
	} {
		a := post(t, h, body)
		var got struct{ Result [][]json.RawMessage }
		if err := json.Unmarshal([]byte(a.body), &got); a.status != 200 || err != nil || len(got.Result) != 1 || len(got.Result[0]) != DefaultTopK {
			t.Errorf("%s: %d %s", body, a.status, a.body)
		}
	}
}

// pyserini and faiss raise on a negative k: a plain 500.
func TestHandlerNegativeTopKIs500(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, animals...), t.TempDir())
	wantInternalError(t, "topk -1", post(t, ix.Handler(StyleBM25), `{"queries": ["zebra"], "topk": -1, "return_scores": true}`))
}

// The one deviation: the embedded index bounds topk.
func TestHandlerTopKAboveMaxIs400(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, animals...), t.TempDir())
	wantJSON(t, "topk 1001", post(t, ix.Handler(StyleDense), `{"queries": ["zebra"], "topk": 1001, "return_scores": true}`), 400,
		`{"detail":"topk 1001 above the embedded retriever's limit of 1000"}`)
}

// A body the FastAPI model does not validate is 422 with pydantic's error
// list; the loose values pydantic's lax mode takes are taken.
func TestHandlerInvalidBodyIs422(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, animals...), t.TempDir())
	h := ix.Handler(StyleDense)
	for _, c := range []struct {
		ctype, body string
		want        []string // type and loc of each problem
	}{
		{"application/json", ``, []string{`missing ["body"]`}},
		{"application/json", `{"topk": 3}`, []string{`missing ["body","queries"]`}},
		{"application/json", `{"queries": "zebra"}`, []string{`list_type ["body","queries"]`}},
		{"application/json", `{"queries": null}`, []string{`list_type ["body","queries"]`}},
		{"application/json", `{"queries": ["a", 7, null]}`, []string{`string_type ["body","queries",1]`, `string_type ["body","queries",2]`}},
		{"application/json", `{"queries": ["a"], "topk": 2.5, "return_scores": "maybe"}`, []string{`int_from_float ["body","topk"]`, `bool_parsing ["body","return_scores"]`}},
		{"application/json", `{"queries": ["a"], "topk": "x", "return_scores": null}`, []string{`int_parsing ["body","topk"]`, `bool_type ["body","return_scores"]`}},
		{"application/json", `{"queries": ["a"], "topk": [3]}`, []string{`int_type ["body","topk"]`}},
		{"application/json", `["a"]`, []string{`model_attributes_type ["body"]`}},
		{"application/json", `nonsense`, []string{`json_invalid ["body",0]`}},
		{"application/json", `{"queries": ["a"]} {}`, []string{`json_invalid ["body",19]`}},
		// curl -d without -H sends a form content type: FastAPI does not
		// read it as JSON.
		{"application/x-www-form-urlencoded", `{"queries": ["a"], "return_scores": true}`, []string{`model_attributes_type ["body"]`}},
	} {
		a := send(t, h, "POST", "/retrieve", c.ctype, c.body)
		var got struct {
			Detail []struct {
				Type string          `json:"type"`
				Loc  json.RawMessage `json:"loc"`
				Msg  string          `json:"msg"`
			} `json:"detail"`
		}
		if err := json.Unmarshal([]byte(a.body), &got); a.status != 422 || a.ctype != "application/json" || err != nil {
			t.Errorf("%s: %d %s %s, want 422", c.body, a.status, a.ctype, a.body)
			continue
		}
		var have []string
		for _, d := range got.Detail {
			have = append(have, d.Type+" "+string(d.Loc))
			if d.Msg == "" {
				t.Errorf("%s: problem without msg: %s", c.body, a.body)
			}
		}
		if strings.Join(have, "; ") != strings.Join(c.want, "; ") {
			t.Errorf("%s: problems %v, want %v", c.body, have, c.want)
		}
	}
	// What lax mode takes: integral floats and numeric strings for topk,
	// 0/1 and yes/no style strings for return_scores, no Content-Type.
	for _, c := range []struct{ ctype, body string }{
		{"application/json; charset=utf-8", `{"queries": ["zebra"], "topk": 2.0, "return_scores": 1}`},
		{"", `{"queries": ["zebra"], "topk": "2", "return_scores": "true"}`},
		{"application/vnd.api+json", `{"queries": ["zebra"], "topk": 2, "return_scores": "YES"}`},
	} {
		a := send(t, h, "POST", "/retrieve", c.ctype, c.body)
		var got struct{ Result [][]json.RawMessage }
		if err := json.Unmarshal([]byte(a.body), &got); a.status != 200 || err != nil || len(got.Result) != 1 || len(got.Result[0]) != 2 {
			t.Errorf("%s %s: %d %s", c.ctype, c.body, a.status, a.body)
		}
	}
}

// retrieval_server.py has one route: no health route, FastAPI's 404 and
// 405 answers elsewhere.
func TestHandlerServesOnlyPOSTRetrieve(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, animals...), t.TempDir())
	h := ix.Handler(StyleDense)
	wantJSON(t, "GET /health", send(t, h, "GET", "/health", "", ""), 404, `{"detail":"Not Found"}`)
	wantJSON(t, "POST /search", send(t, h, "POST", "/search", "application/json", `{}`), 404, `{"detail":"Not Found"}`)
	wantJSON(t, "GET /retrieve", send(t, h, "GET", "/retrieve", "", ""), 405, `{"detail":"Method Not Allowed"}`)
}

func TestParseStyle(t *testing.T) {
	for _, s := range []string{"dense", "bm25"} {
		if st, err := ParseStyle(s); err != nil || string(st) != s {
			t.Errorf("%s: %v %v", s, st, err)
		}
	}
	if _, err := ParseStyle("e5"); err == nil || !strings.Contains(err.Error(), "want dense or bm25") {
		t.Errorf("e5: %v", err)
	}
}
