package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/hindsearch/hindsearch/recipes"
)

const deployDir = "../../docs/deploy"

// The deployment templates parse: the YAML files load (every document of
// the Kubernetes one names its kind), and the shell is valid bash
// (bash -n), the SkyPilot task's run block included.
func TestDeployTemplatesParse(t *testing.T) {
	for _, name := range []string{"skypilot.yaml", "kubernetes.yaml"} {
		data, err := os.ReadFile(filepath.Join(deployDir, name))
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		docs := 0
		for {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			docs++
			if name == "kubernetes.yaml" && (doc["kind"] == nil || doc["apiVersion"] == nil) {
				t.Errorf("%s: document %d has no kind or apiVersion", name, docs)
			}
			if name == "kubernetes.yaml" && doc["kind"] == "Job" {
				// The Job's script: bash -c's argument.
				spec := doc["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
				cmd := spec["containers"].([]any)[0].(map[string]any)["command"].([]any)
				if len(cmd) != 3 || cmd[0] != "bash" || cmd[1] != "-c" {
					t.Fatalf("%s: the Job's command %v, want bash -c SCRIPT", name, cmd)
				}
				script := cmd[2].(string)
				bashN(t, name+" Job", script)
				if !strings.Contains(script, "orchestrate endpoints --selector app=hindsearch-vllm") || !strings.Contains(script, "policy.endpoints_file=/state/endpoints.yaml") {
					t.Errorf("%s: the Job does not follow the pods through an endpoints file:\n%s", name, script)
				}
			}
			if name == "skypilot.yaml" {
				run, _ := doc["run"].(string)
				if run == "" {
					t.Fatalf("%s: no run block", name)
				}
				bashN(t, name+" run", run)
			}
		}
		if name == "kubernetes.yaml" && docs != 6 {
			t.Errorf("%s: %d documents, want the Service, the StatefulSet, the Job and its service account, role and binding", name, docs)
		}
	}
	for _, name := range []string{"hindsearch.sbatch", "endpoints.sh"} {
		data, err := os.ReadFile(filepath.Join(deployDir, name))
		if err != nil {
			t.Fatal(err)
		}
		bashN(t, name, string(data))
	}
}

func bashN(t *testing.T, what, script string) {
	t.Helper()
	cmd := exec.Command("bash", "-n")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("bash -n %s: %v\n%s", what, err, out)
	}
}

// The SLURM script, run with stand-ins for scontrol, srun, curl and the
// program, writes the endpoints file that policy.endpoints_file reads:
// one server per GPU on every node of the allocation, and runs the
// program on the recipe once they answer.
func TestSLURMScriptWritesTheEndpointsFile(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	stub := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stub("scontrol", `[ "$1 $2 $3" = "show hostnames node[1-2]" ] && printf 'node1\nnode2\n'`)
	stub("srun", "exit 0")
	stub("curl", `echo "$@" >> "`+filepath.Join(dir, "health.log")+`"`)
	stub("orchestrate", `echo "$@" > "`+filepath.Join(dir, "run.log")+`"`)
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	endpoints := filepath.Join(dir, "endpoints.yaml")
	cmd := exec.Command("bash", filepath.Join(deployDir, "hindsearch.sbatch"))
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "SLURM_JOB_NODELIST=node[1-2]", "SLURM_GPUS_PER_NODE=h100:2",
		"SLURM_SUBMIT_DIR="+repo, "RECIPE=my-recipe.yaml", "ENDPOINTS="+endpoints, "ORCHESTRATE=orchestrate", "PORT=9000")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the script: %v\n%s", err, out)
	}
	urls, err := recipes.ReadEndpoints(endpoints)
	want := []string{"http://node1:9000", "http://node1:9001", "http://node2:9000", "http://node2:9001"}
	if err != nil || !slices.Equal(urls, want) {
		t.Errorf("the endpoints file reads as %v (%v), want %v", urls, err, want)
	}
	health, _ := os.ReadFile(filepath.Join(dir, "health.log"))
	for _, u := range want {
		if !strings.Contains(string(health), u+"/health") {
			t.Errorf("the script did not wait for %s/health:\n%s", u, health)
		}
	}
	run, _ := os.ReadFile(filepath.Join(dir, "run.log"))
	if strings.TrimSpace(string(run)) != "run my-recipe.yaml --progress lines" {
		t.Errorf("the program ran as %q", run)
	}
	if m, _ := filepath.Glob(endpoints + ".*"); len(m) > 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

// The default binary does not link client-go (the Kubernetes code is
// behind -tags k8s), and the k8s build does.
func TestDefaultBinaryHasNoKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("go list of the whole module")
	}
	deps := func(tags ...string) string {
		args := append([]string{"list"}, tags...)
		args = append(args, "-deps", "./cmd/orchestrate")
		cmd := exec.Command("go", args...)
		cmd.Dir = filepath.Join("..", "..")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if d := deps(); strings.Contains(d, "k8s.io/") {
		t.Errorf("the default build links Kubernetes packages:\n%s", d)
	}
	if d := deps("-tags", "k8s"); !strings.Contains(d, "k8s.io/client-go/kubernetes\n") {
		t.Errorf("the k8s build does not link client-go")
	}
}
