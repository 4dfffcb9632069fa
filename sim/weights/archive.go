package weights

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"time"
)

// ArchiveLayout is how the simulated trainer packs the archives it writes
// (sampler weights and training states): the layout of one of SkyRL's
// backends (recipe key sim.trainer.archive).
type ArchiveLayout string

const (
	// ArchiveJAX is SkyRL's JAX backend (skyrl/utils/storage.py
	// pack_and_upload): a gzip stream at compression level 0 of a tar made
	// with tar.add(dir, arcname=""), which Python's tarfile writes as a
	// first entry "/" (the root directory) followed by the files by name,
	// at the top level ("adapter_config.json").
	ArchiveJAX ArchiveLayout = "jax"
	// ArchiveFSDP is SkyRL's FSDP and Megatron backends
	// (skyrl_train_backend.py _create_tar_from_directory): an uncompressed
	// tar, under the same .tar.gz name, made with tar.add(dir, arcname="."):
	// a first entry "./" followed by "./<file>".
	ArchiveFSDP ArchiveLayout = "fsdp"
)

// ArchiveLayouts are the layouts PackArchive knows, the default first.
var ArchiveLayouts = []ArchiveLayout{ArchiveJAX, ArchiveFSDP}

// PackArchive packs files (names at the top level of the archive, no
// directories) in layout: the entry names and types Python's tarfile
// writes for that SkyRL backend, the root directory first and the files in
// sorted order as tarfile.add lists a directory. Every entry has the
// modification time 0, so the same content packs to the same bytes. An
// empty layout is ArchiveJAX.
func PackArchive(layout ArchiveLayout, files map[string][]byte) ([]byte, error) {
	var root, prefix string
	switch layout {
	case ArchiveJAX, "":
		root, prefix = "/", ""
	case ArchiveFSDP:
		root, prefix = "./", "./"
	default:
		return nil, fmt.Errorf("archive layout %q: want %s or %s", layout, ArchiveJAX, ArchiveFSDP)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		if n == "" || path.Base(n) != n || n == "." || n == ".." {
			return nil, fmt.Errorf("archive file name %q is not a plain file name", n)
		}
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	var w io.Writer = &buf
	var gz *gzip.Writer
	if layout != ArchiveFSDP {
		gz, _ = gzip.NewWriterLevel(&buf, gzip.NoCompression)
		w = gz
	}
	tw := tar.NewWriter(w)
	// The root is a temporary directory in SkyRL (mode 0700, as mkdtemp
	// makes it).
	if err := tw.WriteHeader(&tar.Header{Name: root, Typeflag: tar.TypeDir, Mode: 0o700, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	for _, n := range names {
		b := files[n]
		if err := tw.WriteHeader(&tar.Header{Name: prefix + n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// ReadArchiveFile returns the content of the file name at the top level of
// the archive file at path archive that PackArchive wrote, in either layout
// (told apart by the gzip magic, as the orchestrator does); an archive
// without that file is an error.
func ReadArchiveFile(archive, name string) ([]byte, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", archive, err)
		}
		r = gz
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: no %s", archive, name)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", archive, err)
		}
		if h.Typeflag == tar.TypeReg && (h.Name == name || h.Name == "./"+name) {
			return io.ReadAll(tr)
		}
	}
}
