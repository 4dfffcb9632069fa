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

// do sends body to the handler and returns the status and body.
func do(t *testing.T, h http.Handler, method, path, body string) (int, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusMethodNotAllowed {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", method, path, ct)
		}
	}
	return resp.StatusCode, string(b)
}

// num encodes a float as encoding/json does.
func num(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

func TestHandlerRetrieve(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, append(animals, passage("h", "<b>&", "html <b> & zebra"))...), t.TempDir())
	h := ix.Handler()
	res, err := ix.Search(context.Background(), []string{"zebra", "html"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	z, tg, hh := res[0][0], res[0][1], res[1][0]
	if z.ID != "z" || tg.ID != "t" || hh.ID != "h" || len(res[1]) != 1 {
		t.Fatalf("unexpected hits %v", res)
	}

	status, body := do(t, h, "POST", "/retrieve", `{"queries": ["zebra", "html", ""], "topk": 2, "return_scores": true}`)
	want := `{"result":[[` +
		`{"document":{"id":"z","contents":"\"Zebra\"\nzebra zebra lion"},"score":` + num(z.Score) + `},` +
		`{"document":{"id":"t","contents":"\"Tiger\"\ntiger zebra"},"score":` + num(tg.Score) + `}],` +
		`[{"document":{"id":"h","contents":"\"<b>&\"\nhtml <b> & zebra"},"score":` + num(hh.Score) + `}],` +
		`[]]}` + "\n"
	if status != 200 || body != want {
		t.Errorf("return_scores true: %d\n got %s\nwant %s", status, body, want)
	}

	status, body = do(t, h, "POST", "/retrieve", `{"queries": ["zebra", "html"], "topk": 2}`)
	want = `{"result":[[{"id":"z","contents":"\"Zebra\"\nzebra zebra lion"},{"id":"t","contents":"\"Tiger\"\ntiger zebra"}],` +
		`[{"id":"h","contents":"\"<b>&\"\nhtml <b> & zebra"}]]}` + "\n"
	if status != 200 || body != want {
		t.Errorf("return_scores false: %d\n got %s\nwant %s", status, body, want)
	}

	// No topk: the default of 3.
	status, body = do(t, h, "POST", "/retrieve", `{"queries": ["zebra lion tiger hawk"], "return_scores": false, "extra": 1}`)
	var got struct{ Result [][]document }
	if err := json.Unmarshal([]byte(body), &got); status != 200 || err != nil || len(got.Result) != 1 || len(got.Result[0]) != DefaultTopK {
		t.Errorf("default topk: %d %s", status, body)
	}

	status, body = do(t, h, "POST", "/retrieve", `{"queries": []}`)
	if status != 200 || body != `{"result":[]}`+"\n" {
		t.Errorf("no queries: %d %s", status, body)
	}
}

func TestHandlerBadRequests(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, animals...), t.TempDir())
	h := ix.Handler()
	for _, c := range []struct{ body, detail string }{
		{`{"queries": "zebra"}`, `bad request body: json: cannot unmarshal`},
		{`{"topk": 3}`, `bad request body: \"queries\" is required`},
		{`{"queries": ["a"], "topk": -1}`, `bad request body: \"topk\" must be in [1, 1000]`},
		{`{"queries": ["a"], "topk": 1001}`, `bad request body: \"topk\" must be in [1, 1000]`},
		{`{"queries": ["a"]} {}`, `bad request body: data after the JSON object`},
		{``, `bad request body: EOF`},
		{`nonsense`, `bad request body: invalid character`},
	} {
		status, body := do(t, h, "POST", "/retrieve", c.body)
		if status != 400 || !strings.HasPrefix(body, `{"detail":"`+c.detail) {
			t.Errorf("%s: %d %s; want 400 with detail %q", c.body, status, body, c.detail)
		}
	}
	if status, body := do(t, h, "GET", "/health", ""); status != 200 || body != `{"status":"ok"}`+"\n" {
		t.Errorf("health: %d %s", status, body)
	}
	if status, _ := do(t, h, "GET", "/retrieve", ""); status != http.StatusMethodNotAllowed {
		t.Errorf("GET /retrieve: %d", status)
	}
}
