package recipes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// EndpointsFile is the llm-d file-discovery schema policy.endpoints_file
// is read in: the form a SLURM script, a SkyPilot task or any launcher can
// write (llm-d's no-Kubernetes guide, prime-rl's sbatch templates).
type EndpointsFile struct {
	Endpoints []Endpoint `yaml:"endpoints"`
}

// Endpoint is one policy server of an endpoints file: its base URL is
// http://address:port.
type Endpoint struct {
	// Name names the server (informational).
	Name string `yaml:"name"`
	// Address is the server's IP address or host name.
	Address string `yaml:"address"`
	// Port is its port (a string in llm-d's schema; a number is read too).
	Port string `yaml:"port"`
	// Labels are the launcher's (informational).
	Labels map[string]string `yaml:"labels"`
}

// ReadEndpoints reads an endpoints file and returns its servers' base
// URLs, in the file's order, without duplicates. A file that lists no
// endpoint returns none and no error; one that does not parse, or an
// endpoint without an address or a valid port, is an error naming the
// file and the line.
func ReadEndpoints(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: %s", path, yamlMessage(err))
	}
	var f EndpointsFile
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %s", path, yamlMessage(err))
	}
	// The nodes of each endpoint, for the line of a bad one.
	var items []*yaml.Node
	if len(root.Content) > 0 && root.Content[0].Kind == yaml.MappingNode {
		m := root.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == "endpoints" && m.Content[i+1].Kind == yaml.SequenceNode {
				items = m.Content[i+1].Content
			}
		}
	}
	var urls []string
	for i, e := range f.Endpoints {
		line := 0
		if i < len(items) {
			line = items[i].Line
		}
		where := fmt.Sprintf("%s:%d: endpoints[%d]", path, line, i)
		addr, port := strings.TrimSpace(e.Address), strings.TrimSpace(e.Port)
		if addr == "" {
			return nil, fmt.Errorf("%s: no address", where)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("%s: port %q is not a port number", where, e.Port)
		}
		u := "http://" + net.JoinHostPort(addr, port)
		if !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	return urls, nil
}

// loadEndpoints sets policy.urls from policy.endpoints_file when it is
// set: the file lists the replicas at the start (the run re-reads it while
// it runs), so setting policy.urls too is an error, as is a file that
// lists none.
func (r *Recipe) loadEndpoints() error {
	f := r.Policy.EndpointsFile
	if f == "" {
		return nil
	}
	if !slices.Equal(r.Policy.URLs, []string{Embedded}) && len(r.Policy.URLs) > 0 {
		return Problems{{Key: "policy.endpoints_file", Message: "set it or policy.urls, not both: the file lists the policy servers"}}
	}
	urls, err := ReadEndpoints(f)
	if err != nil {
		return Problems{{Key: "policy.endpoints_file", Message: err.Error()}}
	}
	if len(urls) == 0 {
		return Problems{{Key: "policy.endpoints_file", Message: fmt.Sprintf("%s lists no endpoint: start at least one policy server and list it (endpoints: [{name, address, port}]) before the run", f)}}
	}
	r.Policy.URLs = urls
	return nil
}

// WriteEndpoints writes an endpoints file listing the servers at urls
// (http://address:port each; named by their address) to path atomically:
// a temporary file in path's directory, renamed over it, so that a
// reader never sees it half-written.
func WriteEndpoints(path string, urls []string) error {
	f := EndpointsFile{Endpoints: []Endpoint{}}
	for _, u := range urls {
		host, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimRight(u, "/"), "http://"))
		if err != nil {
			return fmt.Errorf("endpoint %s: want http://address:port: %w", u, err)
		}
		f.Endpoints = append(f.Endpoints, Endpoint{Name: host, Address: host, Port: port})
	}
	data, err := yaml.Marshal(&f)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".endpoints-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing there
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
