//go:build k8s

package pods

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func pod(name, ip string, ready bool, labels map[string]string) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "rl", Labels: labels},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

// Follow lists the ready pods of the selector, then follows the watch:
// a pod that turns ready joins, one deleted or no longer ready leaves,
// pods of other labels never appear.
func TestFollowReadyPods(t *testing.T) {
	vllm := map[string]string{"app": "vllm"}
	cs := fake.NewClientset(
		pod("vllm-0", "10.0.0.1", true, vllm),
		pod("vllm-1", "10.0.0.2", false, vllm),
		pod("judge-0", "10.0.0.9", true, map[string]string{"app": "judge"}),
	)
	s := &Source{Client: cs, Namespace: "rl", Selector: "app=vllm", Port: 8000, Retry: 50 * time.Millisecond}
	urls, err := s.List(context.Background())
	if err != nil || !slices.Equal(urls, []string{"http://10.0.0.1:8000"}) {
		t.Fatalf("List = %v, %v", urls, err)
	}

	var mu sync.Mutex
	var seen [][]string
	last := func() []string {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return nil
		}
		return seen[len(seen)-1]
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Follow(ctx, func(u []string) { mu.Lock(); seen = append(seen, u); mu.Unlock() }, &out)
	}()
	defer func() { cancel(); <-done }()
	wait := func(what string, want []string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if slices.Equal(last(), want) {
				return
			}
		}
		t.Fatalf("%s: last list %v, want %v", what, last(), want)
	}
	wait("the first list", []string{"http://10.0.0.1:8000"})
	pods := cs.CoreV1().Pods("rl")
	bg := context.Background()
	if _, err := pods.UpdateStatus(bg, pod("vllm-1", "10.0.0.2", true, vllm), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("vllm-1 ready", []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000"})
	if _, err := pods.Create(bg, pod("judge-1", "10.0.0.8", true, map[string]string{"app": "judge"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(bg, "vllm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("vllm-0 deleted", []string{"http://10.0.0.2:8000"})
	if _, err := pods.UpdateStatus(bg, pod("vllm-1", "10.0.0.2", false, vllm), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("vllm-1 not ready", []string{})
	mu.Lock()
	defer mu.Unlock()
	for _, l := range seen {
		if slices.Contains(l, "http://10.0.0.9:8000") || slices.Contains(l, "http://10.0.0.8:8000") {
			t.Errorf("a pod of another label was listed: %v", seen)
		}
	}
}
