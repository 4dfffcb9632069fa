//go:build k8s

package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/hindsearch/hindsearch/orchestrator/fleet/pods"
	"github.com/hindsearch/hindsearch/recipes"
)

// taggedCommands are the k8s build's commands: endpoints.
func taggedCommands(e *env) []*cobra.Command { return []*cobra.Command{newEndpointsCmd(e)} }

// namespaceFile is where a pod finds its own namespace.
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func newEndpointsCmd(e *env) *cobra.Command {
	var selector, namespace, out string
	var port int
	var once bool
	cmd := &cobra.Command{
		Use:   "endpoints --selector LABELS --port PORT --out FILE",
		Short: "Keep a policy.endpoints_file equal to the ready pods of a Kubernetes label selector (k8s builds)",
		Long: `Write FILE (llm-d's file-discovery schema, the form policy.endpoints_file
reads) listing http://<pod IP>:PORT for every pod of the label selector that
is running and ready, and rewrite it (atomically) whenever that set changes:
a run whose recipe sets policy.endpoints_file to FILE admits the pods that
become ready and drains those that leave. It lists, then watches, the pods
with client-go (in-cluster configuration, else $KUBECONFIG or
~/.kube/config; it needs get, list and watch on pods), until interrupted.

Example (beside the run, in the same pod or on a shared volume):
  orchestrate endpoints --selector app=vllm --port 8000 --out /shared/endpoints.yaml &
  orchestrate run recipe.yaml --set policy.endpoints_file=/shared/endpoints.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := labels.Parse(selector); err != nil || selector == "" {
				return fmt.Errorf("--selector %q: want a label selector such as app=vllm (%v)", selector, err)
			}
			if port < 1 || port > 65535 {
				return fmt.Errorf("--port %d: want the policy servers' port", port)
			}
			if out == "" {
				return errors.New("--out: name the endpoints file to write")
			}
			if namespace == "" {
				namespace = "default"
				if b, err := os.ReadFile(namespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
					namespace = strings.TrimSpace(string(b))
				}
			}
			client, err := pods.NewClient()
			if err != nil {
				return err
			}
			src := &pods.Source{Client: client, Namespace: namespace, Selector: selector, Port: port, Retry: 2 * time.Second}
			if once {
				urls, err := src.List(cmd.Context())
				if err != nil {
					return err
				}
				return recipes.WriteEndpoints(out, urls)
			}
			src.Follow(cmd.Context(), func(urls []string) {
				if err := recipes.WriteEndpoints(out, urls); err != nil {
					fmt.Fprintf(e.stderr, "endpoints: %s: %v\n", out, err)
					return
				}
				fmt.Fprintf(e.stdout, "endpoints: %s lists %d pods of %s in %s\n", out, len(urls), selector, namespace)
			}, e.stderr)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&selector, "selector", "", "the policy servers' pods: a label selector, e.g. app=vllm")
	f.StringVar(&namespace, "namespace", "", "their namespace (default: this pod's own, else default)")
	f.IntVar(&port, "port", 8000, "the policy servers' port on each pod")
	f.StringVar(&out, "out", "", "the endpoints file to write (policy.endpoints_file)")
	f.BoolVar(&once, "once", false, "write the file once and exit")
	return cmd
}
