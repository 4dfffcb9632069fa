package router

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// The client speaks vllm-router 0.1.17's worker routes as it answers
// them (tried on loopback): the URL in the query, 400 "already exists"
// for a member taken as done, a remove of a non-member answered 200.
func TestClientWorkerRoutes(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	workers := []string{"http://127.0.0.1:18001"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, r.Method+" "+r.URL.RequestURI())
		u := r.URL.Query().Get("url")
		switch r.URL.Path {
		case "/list_workers":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"urls": workers})
		case "/add_worker":
			if slices.Contains(workers, u) {
				http.Error(w, "Worker "+u+" already exists", http.StatusBadRequest)
				return
			}
			workers = append(workers, u)
			io.WriteString(w, "Successfully added worker: "+u)
		case "/remove_worker":
			workers = slices.DeleteFunc(workers, func(x string) bool { return x == u })
			io.WriteString(w, "Successfully removed worker: "+u)
		default:
			http.Error(w, "boom", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	o := transport.DefaultOptions("router", srv.URL)
	o.Retries, o.Timeout = 0, 5*time.Second
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Add(ctx, "http://127.0.0.1:18002"); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(ctx, "http://127.0.0.1:18002"); err != nil {
		t.Errorf("adding a member: %v, want nil", err)
	}
	if err := c.Remove(ctx, "http://127.0.0.1:18001"); err != nil {
		t.Fatal(err)
	}
	got, err := c.Workers(ctx)
	if err != nil || !slices.Equal(got, []string{"http://127.0.0.1:18002"}) {
		t.Errorf("Workers = %v, %v", got, err)
	}
	want := []string{
		"POST /add_worker?url=http%3A%2F%2F127.0.0.1%3A18002",
		"POST /add_worker?url=http%3A%2F%2F127.0.0.1%3A18002",
		"POST /remove_worker?url=http%3A%2F%2F127.0.0.1%3A18001",
		"GET /list_workers",
	}
	if !slices.Equal(calls, want) {
		t.Errorf("calls %v, want %v", calls, want)
	}
	// Another failure is an error naming the router and its status.
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) })
	if err := c.Remove(ctx, "x"); err == nil || !strings.Contains(err.Error(), "router") || !strings.Contains(err.Error(), "500") {
		t.Errorf("a 500: %v", err)
	}
}
