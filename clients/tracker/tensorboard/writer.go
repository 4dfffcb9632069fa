// Package tensorboard writes TensorBoard event files: TFRecord-framed
// Event protobufs (scalars as simple_value, text as the text plugin's
// string tensors), the format TensorBoard's own writer produces and its
// readers (EventAccumulator, the data server) read. It depends on no
// TensorFlow or TensorBoard code: the framing and the few protobuf fields
// are written with protowire (docs/watching.md, "Trackers", says from
// which source files).
package tensorboard

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// fileVersion is the first event of every file (Event.file_version).
const fileVersion = "brain.Event:2"

// Writer appends events to one event file of a log directory.
type Writer struct {
	f    *os.File
	path string
	// texts are the tags whose first value carried the text plugin's
	// metadata (only a tag's first value needs it).
	texts map[string]bool
}

// Open starts a new event file in dir (made if missing), named
// events.out.tfevents.<seconds>.<host>.<pid>.<n> so that it sorts after
// every event file already there (readers take a directory's files in
// name order). With restartAt >= 0 it first writes a SessionLog START at
// that step: readers drop every value at or above it that older files
// hold (TensorBoard's rule for a job restarted from a checkpoint), so a
// resumed run's repeated steps are not shown twice.
func Open(dir string, restartAt int, now time.Time) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	secs := now.Unix()
	names, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	for _, n := range names {
		rest := strings.TrimPrefix(filepath.Base(n), "events.out.tfevents.")
		if s, err := strconv.ParseInt(strings.SplitN(rest, ".", 2)[0], 10, 64); err == nil && s >= secs {
			secs = s + 1
		}
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host = strings.ReplaceAll(host, ".", "_")
	path := filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%010d.%s.%d.%d", secs, host, os.Getpid(), len(names)))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	w := &Writer{f: f, path: path, texts: map[string]bool{}}
	wall := seconds(now)
	first := protowire.AppendTag(nil, 1, protowire.Fixed64Type)
	first = protowire.AppendFixed64(first, math.Float64bits(wall))
	first = protowire.AppendTag(first, 3, protowire.BytesType)
	first = protowire.AppendString(first, fileVersion)
	if err := w.record(first); err != nil {
		f.Close()
		return nil, err
	}
	if restartAt >= 0 {
		// Event.session_log (7) = SessionLog{status (1): START (1)}.
		sl := protowire.AppendTag(nil, 1, protowire.VarintType)
		sl = protowire.AppendVarint(sl, 1)
		if err := w.record(event(wall, restartAt, 7, sl)); err != nil {
			f.Close()
			return nil, err
		}
	}
	return w, nil
}

// Path is the event file's path.
func (w *Writer) Path() string { return w.path }

// Scalars writes one Event at step holding a simple_value per key, in key
// order.
func (w *Writer) Scalars(step int, at time.Time, kv map[string]float64) error {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sum []byte
	for _, k := range keys {
		// Summary.Value{tag (1), simple_value (2, float)}.
		v := protowire.AppendTag(nil, 1, protowire.BytesType)
		v = protowire.AppendString(v, k)
		v = protowire.AppendTag(v, 2, protowire.Fixed32Type)
		v = protowire.AppendFixed32(v, math.Float32bits(float32(kv[k])))
		sum = protowire.AppendTag(sum, 1, protowire.BytesType)
		sum = protowire.AppendBytes(sum, v)
	}
	return w.record(event(seconds(at), step, 5, sum))
}

// Text writes one text summary at step: a string tensor under tag, with
// the text plugin's metadata on the tag's first value.
func (w *Writer) Text(step int, at time.Time, tag, text string) error {
	// TensorProto{dtype (1): DT_STRING (7), tensor_shape (2): {} (a
	// scalar), string_val (8)}.
	t := protowire.AppendTag(nil, 1, protowire.VarintType)
	t = protowire.AppendVarint(t, 7)
	t = protowire.AppendTag(t, 2, protowire.BytesType)
	t = protowire.AppendBytes(t, nil)
	t = protowire.AppendTag(t, 8, protowire.BytesType)
	t = protowire.AppendString(t, text)
	v := protowire.AppendTag(nil, 1, protowire.BytesType)
	v = protowire.AppendString(v, tag)
	if !w.texts[tag] {
		// SummaryMetadata (9){plugin_data (1): {plugin_name (1): "text"}}.
		pd := protowire.AppendTag(nil, 1, protowire.BytesType)
		pd = protowire.AppendString(pd, "text")
		md := protowire.AppendTag(nil, 1, protowire.BytesType)
		md = protowire.AppendBytes(md, pd)
		v = protowire.AppendTag(v, 9, protowire.BytesType)
		v = protowire.AppendBytes(v, md)
	}
	v = protowire.AppendTag(v, 8, protowire.BytesType)
	v = protowire.AppendBytes(v, t)
	sum := protowire.AppendTag(nil, 1, protowire.BytesType)
	sum = protowire.AppendBytes(sum, v)
	if err := w.record(event(seconds(at), step, 5, sum)); err != nil {
		return err
	}
	w.texts[tag] = true
	return nil
}

// Sync flushes the file to disk.
func (w *Writer) Sync() error {
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("tensorboard: %w", err)
	}
	return nil
}

// Close syncs and closes the file.
func (w *Writer) Close() error {
	serr := w.f.Sync()
	cerr := w.f.Close()
	if serr != nil {
		return fmt.Errorf("tensorboard: %w", serr)
	}
	if cerr != nil {
		return fmt.Errorf("tensorboard: %w", cerr)
	}
	return nil
}

// event is an Event{wall_time (1), step (2), field: body}.
func event(wall float64, step int, field protowire.Number, body []byte) []byte {
	e := protowire.AppendTag(nil, 1, protowire.Fixed64Type)
	e = protowire.AppendFixed64(e, math.Float64bits(wall))
	e = protowire.AppendTag(e, 2, protowire.VarintType)
	e = protowire.AppendVarint(e, uint64(int64(step)))
	e = protowire.AppendTag(e, field, protowire.BytesType)
	return protowire.AppendBytes(e, body)
}

// castagnoli is the CRC-32C table of TFRecord's checksums.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// masked is TFRecord's masked CRC-32C.
func masked(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// record appends one TFRecord: the length (uint64 LE), its masked CRC,
// the data, the data's masked CRC.
func (w *Writer) record(data []byte) error {
	buf := make([]byte, 0, len(data)+16)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(data)))
	buf = binary.LittleEndian.AppendUint32(buf, masked(buf[:8]))
	buf = append(buf, data...)
	buf = binary.LittleEndian.AppendUint32(buf, masked(data))
	if _, err := w.f.Write(buf); err != nil {
		return fmt.Errorf("tensorboard: %w", err)
	}
	return nil
}

// seconds is t as the Unix seconds of Event.wall_time.
func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
