package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// benchServer answers every request with a small JSON body after reading
// the request's.
func benchServer(b *testing.B) *httptest.Server {
	answer := []byte(`{"ok":true,"tokens":[1,2,3,4,5,6,7,8,9,10]}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkDo is one POST of an 8 KB body through the whole stack (resty,
// retryablehttp, net/http's Transport) over loopback, server in this
// process.
func BenchmarkDo(b *testing.B) {
	srv := benchServer(b)
	o := DefaultOptions("policy", srv.URL)
	c, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	body := json.RawMessage(`{"prompt":[` + string(bytes.Repeat([]byte("123456,"), 1200)) + `1]}`)
	var out []byte
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(context.Background(), http.MethodPost, "/x", body, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawHTTP is the same exchange on net/http alone, for comparison.
func BenchmarkRawHTTP(b *testing.B) {
	srv := benchServer(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	body := []byte(`{"prompt":[` + string(bytes.Repeat([]byte("123456,"), 1200)) + `1]}`)
	b.ReportAllocs()
	for b.Loop() {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/x", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
}
