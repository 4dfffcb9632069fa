package fleet

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The two sampler path forms map to the file SkyRL writes; everything else
// is refused with an error naming the path.
func TestArchivePathForms(t *testing.T) {
	ok := []struct{ path, want string }{
		// SkyRL's save_weights_for_sampler answer.
		{"tinker://model_3f2a9c1b/hs-step0001", "/ck/model_3f2a9c1b/sampler_weights/hs-step0001.tar.gz"},
		// The hosted service's, with its run id.
		{"tinker://4a1939e6-04be-5a77-9e4e-910ccff9f27e:train:0/sampler_weights/step_2", "/ck/4a1939e6-04be-5a77-9e4e-910ccff9f27e:train:0/sampler_weights/step_2.tar.gz"},
		{"tinker://m.1/sampler_weights/x", "/ck/m.1/sampler_weights/x.tar.gz"},
	}
	for _, c := range ok {
		got, err := ArchivePath("/ck", c.path)
		if err != nil || got != filepath.FromSlash(c.want) {
			t.Errorf("ArchivePath(%q) = %q, %v; want %q", c.path, got, err, c.want)
		}
	}
	if got, err := ArchivePath("rel/ck", "tinker://m/x"); err != nil || got != filepath.FromSlash("rel/ck/m/sampler_weights/x.tar.gz") {
		t.Errorf("relative checkpoints dir: %q, %v", got, err)
	}
	bad := []struct{ path, want string }{
		{"", "not a tinker:// path"},
		{"tinker://", "not a tinker:// path"},
		{"s3://m/sampler_weights/x", "not a tinker:// path"},
		{"m/sampler_weights/x", "not a tinker:// path"},
		{"TINKER://m/x", "not a tinker:// path"},
		{"tinker://m", "want tinker://"},
		{"tinker://m/", "name"},
		{"tinker:///x", "model id"},
		{"tinker://m/weights/x", "training state"},
		{"tinker://m/other/x", "want tinker://"},
		{"tinker://m/sampler_weights/x/y", "want tinker://"},
		{"tinker://m/a/sampler_weights/x", "want tinker://"},
		{"tinker://m/./sampler_weights//x", "want tinker://"},
		{"tinker://m/a/../sampler_weights/x", "want tinker://"},
		{"tinker://m/sampler_weights/", "name"},
		{"tinker://m//x", "want tinker://"},
		{"tinker://../x", "model id"},
		{"tinker://./x", "model id"},
		{"tinker://m/..", "name"},
		{"tinker://m/../../x", "want tinker://"},
		{"tinker:///etc/passwd", "want tinker://"},
		{"tinker://..", "want tinker://"},
		{"tinker://m/x.tar.gz", "name"},
		{"tinker://m/x?y=1", "name"},
		{"tinker://m/x#y", "name"},
		{`tinker://m\..\x/y`, "model id"},
		{"tinker://m/sampler_weights/x y", "name"},
	}
	for _, c := range bad {
		got, err := ArchivePath("/ck", c.path)
		if err == nil {
			t.Errorf("ArchivePath(%q) = %q, want an error", c.path, got)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.path)) {
			t.Errorf("ArchivePath(%q): error %q, want one naming the path and saying %q", c.path, err, c.want)
		}
	}
}

// pyEntry is one entry of an archive as Python's tarfile writes it: the
// raw header name (a directory's with its trailing slash) and type.
type pyEntry struct {
	name string
	typ  byte
	body string
	link string
}

// writePyTar writes entries as Python's tarfile (PAX format, its default)
// does: each entry is preceded by a PAX header carrying its fractional
// modification time. compressed packs it as SkyRL's JAX backend does
// (gzip, level 0); otherwise it is a plain tar, as its FSDP backend
// writes under the same .tar.gz name.
func writePyTar(t *testing.T, path string, compressed bool, entries []pyEntry) {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var gz *gzip.Writer
	if compressed {
		gz, _ = gzip.NewWriterLevel(&buf, gzip.NoCompression)
		w = gz
	}
	tw := tar.NewWriter(w)
	mtime := time.Unix(1796135302, 493096600)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, ModTime: mtime, Linkname: e.link,
			Uname: "root", Gname: "root", Format: tar.FormatPAX}
		switch e.typ {
		case tar.TypeReg:
			h.Size = int64(len(e.body))
		case tar.TypeDir:
			h.Mode = 0o700
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// rawEntries lists the entries of a tar file, or of a gzip stream of one,
// as their headers spell them (name field and type flag), PAX extended
// headers left out: what the reader sees before any interpretation.
func rawEntries(t *testing.T, path string) (compressed bool, out []pyEntry) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if b, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
		compressed = true
	}
	for off := 0; off+512 <= len(b); {
		h := b[off : off+512]
		if bytes.Equal(h, make([]byte, 512)) {
			break
		}
		name := string(bytes.TrimRight(h[:100], "\x00"))
		if prefix := string(bytes.TrimRight(h[345:500], "\x00")); prefix != "" {
			name = prefix + "/" + name
		}
		typ := h[156]
		var size int64
		for _, c := range bytes.Trim(h[124:136], "\x00 ") {
			size = size*8 + int64(c-'0')
		}
		if typ != tar.TypeXHeader {
			out = append(out, pyEntry{name: name, typ: typ})
		}
		off += 512 + int((size+511)/512*512)
	}
	return compressed, out
}

// What Python wrote for each SkyRL backend (testdata/skyrl, made with
// CPython 3.11's tarfile exactly as skyrl/utils/storage.py pack_and_upload
// and skyrl_train_backend.py _create_tar_from_directory call it).
var (
	jaxEntries = []pyEntry{
		{name: "/", typ: tar.TypeDir},
		{name: "adapter_config.json", typ: tar.TypeReg, body: `{"peft_type": "LORA", "r": 8}`},
		{name: "adapter_model.safetensors", typ: tar.TypeReg, body: "jax adapter weights"},
	}
	fsdpFiles = []string{"added_tokens.json", "config.json", "generation_config.json", "merges.txt",
		"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json",
		"special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.json"}
)

// fsdpEntries is a Hugging Face model export as the FSDP backend tars it.
func fsdpEntries() []pyEntry {
	es := []pyEntry{{name: "./", typ: tar.TypeDir}}
	for _, f := range fsdpFiles {
		body := "fsdp " + f
		if strings.HasSuffix(f, ".json") {
			body = `{"file": "` + f + `"}`
		}
		es = append(es, pyEntry{name: "./" + f, typ: tar.TypeReg, body: body})
	}
	return es
}

// names are the entries' names and types, for comparison.
func names(es []pyEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.name+" "+string(e.typ))
	}
	return out
}

// The archives built in Go by writePyTar have the entry names, types and
// compression of the ones Python wrote, and both unpack: the JAX layout's
// root entry "/" and the FSDP layout's plain tar named .tar.gz are
// accepted, the root standing for the target directory.
func TestUnpackSkyRLArchiveLayouts(t *testing.T) {
	root := t.TempDir()
	cases := []struct {
		layout     string
		compressed bool
		entries    []pyEntry
		unpack     func(archive, dir string) (string, error)
		want       []string
	}{
		{"jax", true, jaxEntries, UnpackAdapter, []string{"adapter_config.json", "adapter_model.safetensors"}},
		{"fsdp", false, fsdpEntries(), UnpackModel, fsdpFiles},
	}
	for _, c := range cases {
		t.Run(c.layout, func(t *testing.T) {
			python := filepath.Join("testdata", "skyrl", c.layout+".tar.gz")
			built := filepath.Join(root, c.layout, "built.tar.gz")
			writePyTar(t, built, c.compressed, c.entries)
			pz, pe := rawEntries(t, python)
			gz, ge := rawEntries(t, built)
			if pz != c.compressed || gz != c.compressed || !slices.Equal(names(pe), names(ge)) || !slices.Equal(names(ge), names(c.entries)) {
				t.Fatalf("Python's archive: gzip %v, entries %q; Go's: gzip %v, entries %q", pz, names(pe), gz, names(ge))
			}
			for _, archive := range []string{python, built} {
				dir := filepath.Join(root, c.layout, "out-"+filepath.Base(archive))
				got, err := c.unpack(archive, dir)
				if err != nil {
					t.Fatalf("%s: %v", archive, err)
				}
				if got != dir {
					t.Errorf("%s: unpacked to %s, want %s", archive, got, dir)
				}
				ents, _ := os.ReadDir(dir)
				var files []string
				for _, e := range ents {
					files = append(files, e.Name())
				}
				if !slices.Equal(files, c.want) {
					t.Errorf("%s: unpacked %v, want %v", archive, files, c.want)
				}
				for _, e := range c.entries {
					if e.typ != tar.TypeReg {
						continue
					}
					if b, err := os.ReadFile(filepath.Join(dir, e.name)); err != nil || string(b) != e.body {
						t.Errorf("%s: %s = %q, %v; want %q", archive, e.name, b, err, e.body)
					}
				}
				noPartial(t, dir)
			}
		})
	}
}

// A root entry must be a directory; real escapes are refused in either
// layout (gzip or plain tar), naming the archive, and nothing is written
// outside the target.
func TestUnpackRefusesEscapesInBothLayouts(t *testing.T) {
	cfg := pyEntry{name: "adapter_config.json", typ: tar.TypeReg, body: "{}"}
	cases := []struct {
		name    string
		entries []pyEntry
		want    string
	}{
		{"parent", []pyEntry{{name: "/", typ: tar.TypeDir}, cfg, {name: "../evil", typ: tar.TypeReg, body: "x"}}, "escapes"},
		{"parent under ./", []pyEntry{{name: "./", typ: tar.TypeDir}, {name: "./../evil", typ: tar.TypeReg, body: "x"}}, "escapes"},
		{"inner parent", []pyEntry{{name: "a/../../evil", typ: tar.TypeReg, body: "x"}}, "escapes"},
		{"absolute file", []pyEntry{{name: "/", typ: tar.TypeDir}, {name: "/etc/evil", typ: tar.TypeReg, body: "x"}}, "escapes"},
		{"absolute dir", []pyEntry{{name: "/etc/", typ: tar.TypeDir}}, "escapes"},
		{"double slash root", []pyEntry{{name: "//", typ: tar.TypeDir}}, "escapes"},
		{"root as a file", []pyEntry{{name: ".", typ: tar.TypeReg, body: "x"}}, "not a directory"},
		{"root as a link", []pyEntry{{name: "/", typ: tar.TypeSymlink, link: "/etc"}}, "not a directory"},
		{"symlink", []pyEntry{{name: "/", typ: tar.TypeDir}, {name: "adapter_config.json", typ: tar.TypeSymlink, link: "/etc/passwd"}}, "not a file or directory"},
		{"symlink dir", []pyEntry{{name: "./d", typ: tar.TypeSymlink, link: "../.."}, {name: "./d/evil", typ: tar.TypeReg, body: "x"}}, "not a file or directory"},
		{"hard link", []pyEntry{{name: "./adapter_config.json", typ: tar.TypeLink, link: "../evil"}}, "not a file or directory"},
		{"char device", []pyEntry{cfg, {name: "tty", typ: tar.TypeChar}}, "not a file or directory"},
		{"fifo", []pyEntry{cfg, {name: "./fifo", typ: tar.TypeFifo}}, "not a file or directory"},
	}
	for _, c := range cases {
		for _, compressed := range []bool{true, false} {
			t.Run(c.name+map[bool]string{true: " gzip", false: " plain"}[compressed], func(t *testing.T) {
				root := t.TempDir()
				archive := filepath.Join(root, "in", "a.tar.gz")
				writePyTar(t, archive, compressed, c.entries)
				dir := filepath.Join(root, "in", "adapters", "new")
				_, err := UnpackAdapter(archive, dir)
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), archive) {
					t.Fatalf("UnpackAdapter: %v, want an error naming %s and saying %q", err, archive, c.want)
				}
				for _, p := range []string{filepath.Join(root, "in", "adapters", "evil"), filepath.Join(root, "in", "evil"), filepath.Join(root, "evil")} {
					if _, err := os.Lstat(p); err == nil {
						t.Errorf("%s was written", p)
					}
				}
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Errorf("a refused archive created %s", dir)
				}
				noPartial(t, dir)
			})
		}
	}
}

// What is neither a gzip stream nor a tar archive, and a gzip stream that
// holds no tar, are refused with an error naming the file.
func TestUnpackRefusesWhatIsNoArchive(t *testing.T) {
	root := t.TempDir()
	gzipped := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"text", []byte("not an archive at all"), "neither a gzip stream nor a tar archive"},
		{"empty", nil, "neither a gzip stream nor a tar archive"},
		{"zeros", make([]byte, 1024), "neither a gzip stream nor a tar archive"},
		{"zip", append([]byte("PK\x03\x04"), make([]byte, 600)...), "neither a gzip stream nor a tar archive"},
		{"gzip of text", gzipped([]byte(strings.Repeat("text ", 200))), "a gzip stream that does not hold a tar archive"},
		{"bad gzip", []byte{0x1f, 0x8b, 0, 0}, "a gzip stream that does not open"},
	}
	for _, c := range cases {
		archive := filepath.Join(root, strings.ReplaceAll(c.name, " ", "-")+".tar.gz")
		if err := os.WriteFile(archive, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		for what, unpack := range map[string]func(string, string) (string, error){"adapter": UnpackAdapter, "model": UnpackModel} {
			dir := filepath.Join(root, "out-"+what)
			if _, err := unpack(archive, dir); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), archive) {
				t.Errorf("%s, %s: %v, want an error naming %s and saying %q", c.name, what, err, archive, c.want)
			}
			noPartial(t, dir)
		}
	}
}
