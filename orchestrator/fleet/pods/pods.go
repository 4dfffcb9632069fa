//go:build k8s

// Package pods follows the policy servers of a Kubernetes label selector
// (policy.pods): the pods that are running and ready, each at
// http://<pod IP>:<port>, listed and then watched with client-go. It is
// built only with -tags k8s, so that the default binary does not link
// client-go; the program's setup calls it through a build-tagged file.
package pods

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Source is one label selector's policy servers.
type Source struct {
	// Client is the cluster's API (kubernetes.NewForConfig, or a fake
	// clientset in tests).
	Client kubernetes.Interface
	// Namespace is where the pods are.
	Namespace string
	// Selector is the label selector (e.g. "app=vllm").
	Selector string
	// Port is the policy servers' port on each pod.
	Port int
	// Retry is how long to wait before listing again after the watch
	// ended or failed (0: 2 s).
	Retry time.Duration
}

// NewClient returns the API client of the cluster the program runs in
// (in-cluster configuration), else of $KUBECONFIG or ~/.kube/config.
func NewClient() (kubernetes.Interface, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		path := os.Getenv("KUBECONFIG")
		if path == "" {
			home, _ := os.UserHomeDir()
			path = filepath.Join(home, ".kube", "config")
		}
		if cfg, err = clientcmd.BuildConfigFromFlags("", path); err != nil {
			return nil, fmt.Errorf("kubernetes: no in-cluster configuration and %s: %w", path, err)
		}
	}
	return kubernetes.NewForConfig(cfg)
}

// URL is the policy server's URL of pod p, or "" when p is not serving:
// not running, not ready, being deleted, without an IP, or not matching
// the selector (checked here too: a watch event is not filtered by every
// API server or fake).
func (s *Source) URL(p *corev1.Pod) string {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return ""
	}
	if sel, err := labels.Parse(s.Selector); err != nil || !sel.Matches(labels.Set(p.Labels)) {
		return ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(s.Port))
		}
	}
	return ""
}

// List returns the URLs of the pods serving now, sorted.
func (s *Source) List(ctx context.Context) ([]string, error) {
	serving, _, err := s.list(ctx)
	return sortedURLs(serving), err
}

// list returns the pods serving now (pod name -> URL) and the list's
// resource version (where a watch starts).
func (s *Source) list(ctx context.Context) (map[string]string, string, error) {
	l, err := s.Client.CoreV1().Pods(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: s.Selector})
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes: list pods %q in namespace %s: %w", s.Selector, s.Namespace, err)
	}
	serving := map[string]string{}
	for i := range l.Items {
		if u := s.URL(&l.Items[i]); u != "" {
			serving[l.Items[i].Name] = u
		}
	}
	return serving, l.ResourceVersion, nil
}

// Follow calls follow with the serving pods' URLs (sorted) whenever they
// change, until ctx ends: a list, then a watch from it; when the watch
// ends or fails it lists again after Retry. Errors are said on out, one
// line each, and leave the last list in force.
func (s *Source) Follow(ctx context.Context, follow func(urls []string), out io.Writer) {
	retry := s.Retry
	if retry <= 0 {
		retry = 2 * time.Second
	}
	var last []string
	emitted := false
	emit := func(urls []string) {
		if !emitted || !slices.Equal(urls, last) {
			emitted, last = true, urls
			follow(urls)
		}
	}
	for ctx.Err() == nil {
		if err := s.watchOnce(ctx, emit); err != nil && ctx.Err() == nil {
			fmt.Fprintf(out, "endpoints: %v; listing again in %s\n", err, retry)
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// watchOnce lists the pods, emits their URLs, then watches them, emitting
// the URLs after every change, until the watch ends.
func (s *Source) watchOnce(ctx context.Context, emit func([]string)) error {
	serving, version, err := s.list(ctx)
	if err != nil {
		return err
	}
	emit(sortedURLs(serving))
	w, err := s.Client.CoreV1().Pods(s.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: s.Selector, ResourceVersion: version})
	if err != nil {
		return fmt.Errorf("kubernetes: watch pods %q: %w", s.Selector, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("kubernetes: the watch of pods %q ended", s.Selector)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			switch {
			case ev.Type == watch.Error:
				return fmt.Errorf("kubernetes: watch of pods %q: %v", s.Selector, apiStatus(ev.Object))
			case !isPod:
				continue
			case ev.Type == watch.Deleted:
				delete(serving, p.Name)
			default:
				if u := s.URL(p); u != "" {
					serving[p.Name] = u
				} else {
					delete(serving, p.Name)
				}
			}
			emit(sortedURLs(serving))
		}
	}
}

func sortedURLs(m map[string]string) []string {
	urls := []string{}
	for _, u := range m {
		urls = append(urls, u)
	}
	slices.Sort(urls)
	return slices.Compact(urls)
}

// apiStatus is the message of a watch's error event.
func apiStatus(o any) string {
	if st, ok := o.(*metav1.Status); ok {
		return st.Message
	}
	return fmt.Sprintf("%v", o)
}
