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
			if name == "skypilot.yaml" {
				run, _ := doc["run"].(string)
				if run == "" {
					t.Fatalf("%s: no run block", name)
				}
				bashN(t, name+" run", run)
			}
		}
		if name == "kubernetes.yaml" && docs != 3 {
			t.Errorf("%s: %d documents, want the Service, the StatefulSet and the Job", name, docs)
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
