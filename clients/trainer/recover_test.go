package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// skyrl is a fake of the parts of SkyRL's Tinker server that are not
// idempotent (skyrl/tinker/api.py): create_model makes a new model per call
// and lists it in GET training_runs; a save checks its name first (409
// "already exists") and its checkpoint is listed once completed; a
// load_weights after any other request on the model is a 400. lose drops
// the answers of the next requests to a route after handling them.
type skyrl struct {
	*httptest.Server
	mu     sync.Mutex
	n      int
	models []fakeModel
	// requests counts the non-create requests on each model.
	requests map[string]int
	// ckpts are the checkpoints by model/type/name; done says completed.
	ckpts map[string]bool
	lose  map[string]int
	posts map[string]int
	// refuse answers the next requests to a route with this status first,
	// without handling them.
	refuse map[string]int
	// saveDelay is how long a checkpoint stays pending.
	saveDelay time.Duration
	// neverComplete keeps checkpoints pending for good.
	neverComplete bool
	// onLost runs when an answer is dropped (with mu held).
	onLost  func(route string)
	queries []string
	// failed holds the error of each checkpoint (by model/type/name) that
	// failed on the server; downloads counts GETs of archives' downloads.
	failed    map[string]string
	downloads int
}

type fakeModel struct {
	id, base string
	rank     int
}

func newSkyRL(t *testing.T) *skyrl {
	f := &skyrl{requests: map[string]int{}, ckpts: map[string]bool{}, lose: map[string]int{},
		posts: map[string]int{}, refuse: map[string]int{}, failed: map[string]string{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *skyrl) serve(w http.ResponseWriter, r *http.Request) {
	route := strings.TrimPrefix(r.URL.Path, "/api/v1/")
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method == http.MethodPost {
		f.posts[route]++
	}
	if st := f.refuse[route]; st != 0 {
		delete(f.refuse, route)
		http.Error(w, `{"detail":"refused"}`, st)
		return
	}
	status, answer := f.handle(r, route, body)
	if f.lose[route] > 0 {
		f.lose[route]--
		if f.onLost != nil {
			f.onLost(route)
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusFound {
		w.Header().Set("Location", strings.TrimSuffix(r.URL.Path, "/archive")+"/download")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(answer)
}

// with runs fn with the fake's lock held: the tests read and change its
// state through it.
func (f *skyrl) with(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// postsTo is the number of POSTs to route so far.
func (f *skyrl) postsTo(route string) (n int) {
	f.with(func() { n = f.posts[route] })
	return n
}

// modelList is the server's models so far.
func (f *skyrl) modelList() (ms []fakeModel) {
	f.with(func() { ms = append(ms, f.models...) })
	return ms
}

func detailOf(msg string) map[string]any { return map[string]any{"detail": msg} }

func (f *skyrl) future() map[string]any {
	f.n++
	return map[string]any{"request_id": strconv.Itoa(f.n), "future_id": strconv.Itoa(f.n), "status": "pending"}
}

func (f *skyrl) handle(r *http.Request, route string, body map[string]any) (int, any) {
	str := func(k string) string { s, _ := body[k].(string); return s }
	switch {
	case route == "create_session":
		return 200, map[string]any{"session_id": "sess-1"}
	case route == "create_model":
		f.n++
		id := fmt.Sprintf("model_%04d", f.n)
		rank := int(body["lora_config"].(map[string]any)["rank"].(float64))
		f.models = append(f.models, fakeModel{id, str("base_model"), rank})
		return 200, map[string]any{"model_id": id, "base_model": str("base_model"), "status": "created", "request_id": strconv.Itoa(f.n)}
	case route == "retrieve_future":
		// Every future is ready; create_model's result names its model.
		id, _ := strconv.Atoi(str("request_id"))
		for _, m := range f.models {
			if m.id == fmt.Sprintf("model_%04d", id) {
				return 200, map[string]any{"model_id": m.id}
			}
		}
		return 200, map[string]any{"path": "tinker://from-future", "type": "ok"}
	case route == "training_runs":
		f.queries = append(f.queries, r.URL.RawQuery)
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		runs := []any{}
		for i := offset; i < len(f.models) && i < offset+limit; i++ {
			m := f.models[i]
			runs = append(runs, map[string]any{"training_run_id": m.id, "base_model": m.base, "is_lora": true, "lora_rank": m.rank})
		}
		return 200, map[string]any{"training_runs": runs, "cursor": map[string]any{"offset": offset, "limit": limit, "total_count": len(f.models)}}
	case route == "weights_info", strings.HasSuffix(route, "/archive"):
		// SkyRL's validate_checkpoint: 404, 425 pending, 500 failed.
		var key string
		if route == "weights_info" {
			p := strings.Split(strings.TrimPrefix(str("tinker_path"), "tinker://"), "/")
			key = p[0] + "/training/" + p[2]
		} else {
			p := strings.Split(strings.TrimPrefix(route, "training_runs/"), "/")
			key = p[0] + "/sampler/" + p[2]
		}
		done, ok := f.ckpts[key]
		switch {
		case !ok:
			return 404, detailOf("Checkpoint not found")
		case f.failed[key] != "":
			return 500, detailOf("Checkpoint creation failed: " + f.failed[key])
		case !done:
			return 425, detailOf("Checkpoint is still being created")
		case route == "weights_info":
			return 200, map[string]any{"base_model": "m", "is_lora": false, "lora_rank": 0}
		}
		return 302, map[string]any{}
	case strings.HasSuffix(route, "/download"):
		f.downloads++
		return 200, map[string]any{}
	case strings.HasPrefix(route, "training_runs/") && strings.HasSuffix(route, "/checkpoints"):
		id := strings.TrimSuffix(strings.TrimPrefix(route, "training_runs/"), "/checkpoints")
		cks := []any{}
		for key, done := range f.ckpts {
			parts := strings.SplitN(key, "/", 3)
			if parts[0] != id || !done {
				continue
			}
			kind := "weights"
			if parts[1] == "sampler" {
				kind = "sampler_weights"
			}
			cks = append(cks, map[string]any{"checkpoint_id": parts[2], "checkpoint_type": parts[1], "time": "2026-12-01T00:00:00Z",
				"tinker_path": "tinker://" + id + "/" + kind + "/" + parts[2]})
		}
		return 200, map[string]any{"checkpoints": cks}
	case route == "save_weights_for_sampler", route == "save_weights":
		kind := "training"
		if route == "save_weights_for_sampler" {
			kind = "sampler"
		}
		model, name := str("model_id"), str("path")
		key := model + "/" + kind + "/" + name
		if _, ok := f.ckpts[key]; ok {
			return 409, detailOf(fmt.Sprintf("Checkpoint '%s' already exists for model '%s'", name, model))
		}
		f.ckpts[key] = false
		if !f.neverComplete {
			time.AfterFunc(f.saveDelay, func() {
				f.mu.Lock()
				f.ckpts[key] = true
				f.mu.Unlock()
			})
		}
		f.requests[model]++
		return 200, f.future()
	case route == "load_weights":
		model := str("model_id")
		if n := f.requests[model]; n > 0 {
			return 400, detailOf(fmt.Sprintf("LoadWeights is not permitted with seq_id %v", body["seq_id"]))
		}
		f.requests[model]++
		return 200, f.future()
	case route == "optim_step":
		f.requests[str("model_id")]++
		return 200, f.future()
	}
	return 404, detailOf("Not Found")
}

func skyrlClient(t *testing.T, f *skyrl) *Client {
	t.Helper()
	o := transport.DefaultOptions("trainer", f.URL)
	o.Timeout = 2 * time.Second
	o.RetryWaitMin, o.RetryWaitMax = time.Millisecond, 2*time.Millisecond
	c, err := New(o, "")
	if err != nil {
		t.Fatal(err)
	}
	c.PollWaitMin, c.PollWaitMax, c.ListWaitMax = time.Millisecond, 4*time.Millisecond, 5*time.Millisecond
	t.Cleanup(c.Close)
	return c
}

func fakeSession() *Session { return &Session{ID: "sess-1"} }

// create_model's answer is lost after the server made the model: the client
// does not send it again and adopts the one new model of its base model and
// rank, leaving older models alone.
func TestCreateModelLostAnswerAdoptsTheNewModel(t *testing.T) {
	f := newSkyRL(t)
	f.with(func() {
		f.models = []fakeModel{{"model_old1", "Qwen/Qwen2.5-3B-Instruct", 0}, {"model_old2", "Qwen/Qwen2.5-3B-Instruct", 32}}
	})
	f.with(func() { f.lose["create_model"] = 1 })
	c := skyrlClient(t, f)
	id, err := c.CreateModel(context.Background(), fakeSession(), "Qwen/Qwen2.5-3B-Instruct", 0, 7)
	if err != nil {
		t.Fatal(err)
	}
	ms := f.modelList()
	if f.postsTo("create_model") != 1 || len(ms) != 3 {
		t.Fatalf("%d create_model posts, %d models: want 1 post and one new model", f.postsTo("create_model"), len(ms))
	}
	if id != ms[2].id {
		t.Fatalf("adopted %q, the server made %q", id, ms[2].id)
	}
	for _, q := range f.queries {
		if q != "limit=100&offset=0" {
			t.Errorf("training_runs query %q, want an explicit limit and offset", q)
		}
	}
	// The adopted model is this client's: a lost load on it is recovered.
	f.with(func() { f.lose["load_weights"] = 1 })
	if err := c.LoadState(context.Background(), id, "tinker://model_old1/weights/s1"); err != nil {
		t.Fatalf("load on the adopted model: %v", err)
	}
}

// A create_model refused with a 5xx before the server made anything is
// sent again once the listing shows no new model.
func TestCreateModelNotMadeIsSentAgain(t *testing.T) {
	f := newSkyRL(t)
	f.with(func() { f.refuse["create_model"] = http.StatusBadGateway })
	c := skyrlClient(t, f)
	id, err := c.CreateModel(context.Background(), fakeSession(), "m", 8, 7)
	if err != nil {
		t.Fatal(err)
	}
	if ms := f.modelList(); f.postsTo("create_model") != 2 || len(ms) != 1 || id != ms[0].id {
		t.Fatalf("%d posts, models %v, id %q", f.postsTo("create_model"), ms, id)
	}
	// A 4xx refusal is final.
	f.with(func() { f.refuse["create_model"] = http.StatusNotFound })
	if _, err := c.CreateModel(context.Background(), fakeSession(), "m", 8, 7); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("err %v", err)
	}
	if f.postsTo("create_model") != 3 {
		t.Fatalf("a 404 was sent again (%d posts)", f.postsTo("create_model"))
	}
}

// Two new models of the same kind after a lost answer cannot be told apart:
// an error naming the trainer, and nothing sent again.
func TestCreateModelAmbiguousListingIsAnError(t *testing.T) {
	f := newSkyRL(t)
	f.with(func() { f.lose["create_model"] = 1 })
	f.with(func() { f.onLost = func(string) { f.models = append(f.models, fakeModel{"model_other", "m", 8}) } })
	c := skyrlClient(t, f)
	_, err := c.CreateModel(context.Background(), fakeSession(), "m", 8, 7)
	if err == nil || !strings.Contains(err.Error(), "cannot tell which one") || !strings.Contains(err.Error(), f.URL) {
		t.Fatalf("err %v", err)
	}
	if f.postsTo("create_model") != 1 {
		t.Fatalf("%d posts", f.postsTo("create_model"))
	}
}

// Without a listing the lost answer cannot be recovered: a clear error
// naming the trainer's URL, and nothing sent again.
func TestCreateModelWithoutListingFailsClearly(t *testing.T) {
	f := newSkyRL(t)
	f.with(func() { f.lose["create_model"] = 1 })
	f.with(func() { f.refuse["training_runs"] = http.StatusNotFound })
	c := skyrlClient(t, f)
	_, err := c.CreateModel(context.Background(), fakeSession(), "m", 8, 7)
	if err == nil || !strings.Contains(err.Error(), f.URL+"/api/v1/training_runs") || !strings.Contains(err.Error(), "may have made a model") {
		t.Fatalf("err %v", err)
	}
	if f.postsTo("create_model") != 1 {
		t.Fatalf("%d posts", f.postsTo("create_model"))
	}
}

// Rank 0 (full fine-tuning) is sent as lora_config.rank 0; a negative rank
// is refused before anything is sent.
func TestCreateModelRankZero(t *testing.T) {
	f := newSkyRL(t)
	c := skyrlClient(t, f)
	if _, err := c.CreateModel(context.Background(), fakeSession(), "m", 0, 7); err != nil {
		t.Fatal(err)
	}
	if ms := f.modelList(); len(ms) != 1 || ms[0].rank != 0 {
		t.Fatalf("models %v", ms)
	}
	if _, err := c.CreateModel(context.Background(), fakeSession(), "m", -1, 7); err == nil || f.postsTo("create_model") != 1 {
		t.Fatalf("rank -1: %v, %d posts", err, f.postsTo("create_model"))
	}
}

// A save whose answer is lost is retried, the retry is answered 409
// "already exists", and the client waits for the checkpoint to be listed
// as completed and returns the listing's path.
func TestSaveLostAnswerThen409IsDone(t *testing.T) {
	for _, tc := range []struct {
		route, want string
		save        func(c *Client) (string, error)
	}{
		{"save_weights_for_sampler", "tinker://m1/sampler_weights/step1", func(c *Client) (string, error) {
			return c.SaveWeightsForSampler(context.Background(), "m1", "step1")
		}},
		{"save_weights", "tinker://m1/weights/state1", func(c *Client) (string, error) {
			return c.SaveState(context.Background(), "m1", "state1")
		}},
	} {
		t.Run(tc.route, func(t *testing.T) {
			f := newSkyRL(t)
			f.with(func() { f.saveDelay = 30 * time.Millisecond })
			f.with(func() { f.lose[tc.route] = 1 })
			c := skyrlClient(t, f)
			p, err := tc.save(c)
			if err != nil || p != tc.want {
				t.Fatalf("path %q, err %v; want %q", p, err, tc.want)
			}
			if f.posts[tc.route] != 2 {
				t.Fatalf("%d posts, want the lost one and its retry", f.posts[tc.route])
			}
			// The seq_id was used once; the next call goes on.
			if _, err := c.OptimStep(context.Background(), "m1", adam); err != nil || c.LastSeqID("m1") != 2 {
				t.Fatalf("next call: %v, last seq_id %d", err, c.LastSeqID("m1"))
			}
		})
	}
}

// A 409 on the first attempt is a name used before: an error, with no
// waiting for a listing.
func TestSave409OnFirstAttemptIsAnError(t *testing.T) {
	f := newSkyRL(t)
	f.with(func() { f.ckpts["m1/sampler/step1"] = true })
	c := skyrlClient(t, f)
	_, err := c.SaveWeightsForSampler(context.Background(), "m1", "step1")
	if err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("err %v", err)
	}
}

// A lost save whose checkpoint never completes fails once RecoveryTimeout
// is spent, saying what was seen.
func TestSaveLostAnswerNeverListedFails(t *testing.T) {
	f := newSkyRL(t)
	f.with(func() { f.neverComplete = true })
	f.with(func() { f.lose["save_weights"] = 1 })
	c := skyrlClient(t, f)
	c.RecoveryTimeout = 50 * time.Millisecond
	_, err := c.SaveState(context.Background(), "m1", "state1")
	if err == nil || !strings.Contains(err.Error(), "not listed as completed") || !strings.Contains(err.Error(), "training_runs/m1/checkpoints") {
		t.Fatalf("err %v", err)
	}
}

// A lost load_weights on a model this client created, as its first call,
// is retried, answered 400 "not permitted", and taken as done; the same
// answer otherwise is an error.
func TestLoadLostAnswerThen400IsDone(t *testing.T) {
	f := newSkyRL(t)
	c := skyrlClient(t, f)
	id, err := c.CreateModel(context.Background(), fakeSession(), "m", 0, 7)
	if err != nil {
		t.Fatal(err)
	}
	f.with(func() { f.lose["load_weights"] = 1 })
	if err := c.LoadState(context.Background(), id, "tinker://old/weights/s1"); err != nil {
		t.Fatal(err)
	}
	var onModel int
	f.with(func() { onModel = f.requests[id] })
	if f.postsTo("load_weights") != 2 || onModel != 1 {
		t.Fatalf("%d posts, %d requests on the model", f.postsTo("load_weights"), onModel)
	}
	// Not the model's first call: the 400 is an error.
	if err := c.LoadState(context.Background(), id, "tinker://old/weights/s1"); err == nil || !strings.Contains(err.Error(), "not permitted") {
		t.Fatalf("second load: %v", err)
	}
	// A model this client did not create: the 400 is an error.
	f.with(func() { f.requests["foreign"] = 1 })
	if err := c.LoadState(context.Background(), "foreign", "tinker://old/weights/s1"); err == nil {
		t.Fatal("a foreign model's 400 was taken as done")
	}
}
