package fleet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
)

// healthyPolicy is a replica whose server answers its health check.
type healthyPolicy struct{ fakePolicy }

func (p *healthyPolicy) Health(context.Context) error { return nil }

// syncBuffer is an io.Writer safe for the watcher's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// writeEndpoints replaces path atomically (a rename, as a launcher
// should) with an endpoints file listing ports on 127.0.0.1.
func writeEndpoints(t *testing.T, path string, ports ...int) {
	t.Helper()
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for _, p := range ports {
		fmt.Fprintf(&b, "  - name: vllm-%d\n    address: 127.0.0.1\n    port: \"%d\"\n    labels: {role: policy}\n", p, p)
	}
	if len(ports) == 0 {
		b.Reset()
		b.WriteString("endpoints: []\n")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("after 10 s: %s", what)
}

func url(port int) string { return fmt.Sprintf("http://127.0.0.1:%d", port) }

// Replicas follow the endpoints file: one that appears is admitted once
// healthy and given the weights (Readmit), one that leaves is drained and
// gets no request, a file listing none makes requests wait, and a file
// that does not parse changes nothing.
func TestWatchEndpointsFollowsTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "endpoints.yaml")
	writeEndpoints(t, path, 8001)
	r := New([]policy.Policy{&healthyPolicy{fakePolicy{url: url(8001)}}})
	r.book = newWeightBook("base", false, 1)
	var mu sync.Mutex
	var readmitted []string
	r.Readmit = func(_ context.Context, p policy.Policy) error {
		mu.Lock()
		defer mu.Unlock()
		readmitted = append(readmitted, p.URL())
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.WatchEndpoints(ctx, path, 10*time.Millisecond, func(u string) (policy.Policy, error) {
			return &healthyPolicy{fakePolicy{url: u}}, nil
		}, out)
	}()
	defer func() { cancel(); <-done }()

	served := func(model string) string {
		var got string
		if err := r.CallFor(ctx, model, func(p policy.Policy) error { got = p.URL(); return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}

	// A second server appears: added drained, admitted after Readmit.
	writeEndpoints(t, path, 8001, 8002)
	eventually(t, "8002 admitted", func() bool { return r.Len() == 2 && !r.Down(1) })
	mu.Lock()
	if !slices.Equal(readmitted, []string{url(8002)}) {
		t.Errorf("readmitted %v, want 8002 once", readmitted)
	}
	mu.Unlock()
	if got := r.AllHold("base"); !got {
		t.Errorf("the new replica does not hold the base weights in the book")
	}

	// The first leaves: every request goes to the second.
	writeEndpoints(t, path, 8002)
	eventually(t, "8001 removed", func() bool { return r.Gone(0) })
	for range 5 {
		if got := served("base"); got != url(8002) {
			t.Fatalf("a request went to %s after 8001 left the file", got)
		}
	}

	// A file that does not parse changes nothing and is said once.
	if err := os.WriteFile(path, []byte("endpoints: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the parse error said", func() bool { return strings.Contains(out.String(), "keeping the 1 replicas") })
	if got := r.URLs(); !slices.Equal(got, []string{url(8002)}) {
		t.Errorf("after a bad file the set is %v", got)
	}

	// None listed: a request waits, and runs once one is listed again (the
	// first server comes back at its old index).
	writeEndpoints(t, path)
	eventually(t, "8002 removed", func() bool { return r.Gone(1) })
	got := make(chan string, 1)
	go func() {
		var u string
		_ = r.CallFor(ctx, "base", func(p policy.Policy) error { u = p.URL(); return nil })
		got <- u
	}()
	select {
	case u := <-got:
		t.Fatalf("a request ran on %s with no endpoint listed", u)
	case <-time.After(200 * time.Millisecond):
	}
	writeEndpoints(t, path, 8001)
	select {
	case u := <-got:
		if u != url(8001) {
			t.Errorf("the waiting request ran on %s", u)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting request still waits 10 s after 8001 was listed again")
	}
	if r.Len() != 2 {
		t.Errorf("the set grew to %d for a URL it held before", r.Len())
	}
	for _, want := range []string{"8002 added", "8001 removed", "lists no endpoint: requests wait"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the watcher did not say %q:\n%s", want, out.String())
		}
	}
}
