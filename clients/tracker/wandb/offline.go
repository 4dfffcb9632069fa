// Package wandb writes Weights & Biases offline run directories: the
// layout and transaction log (a LevelDB-style log of wandb_internal.Record
// protobufs) that the wandb client writes with mode "offline" and that
// `wandb sync` uploads later, the way clusters without internet use W&B.
// The program never talks to W&B's servers and never needs an API key:
// online logging would mean following W&B's undocumented, server-versioned
// GraphQL and file-stream protocol, which cannot be checked from here
// (docs/watching.md, "Trackers", has the source read, file and line).
package wandb

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The transaction log's framing (wandb/sdk/internal/datastore.py): a
// 7-byte file header, then 32 KiB blocks of chunks, each with a 7-byte
// header (CRC-32 IEEE of type and payload, length, type).
const (
	blockSize   = 32768
	chunkHeader = 7
	chunkFull   = 1
	chunkFirst  = 2
	chunkMiddle = 3
	chunkLast   = 4
)

// fileHeader is ":W&B", magic 0xBEE1 (little-endian), version 0.
var fileHeader = []byte{':', 'W', '&', 'B', 0xe1, 0xbe, 0}

// Run is what the run record says of a run.
type Run struct {
	// ID is the W&B run id (kept across --resume by the caller).
	ID string
	// Project, Entity, Name, Group are the run's W&B project, entity
	// (empty: the user's default when synced), display name and group.
	Project, Entity, Name, Group string
	// Tags label the run.
	Tags []string
	// Notes describe it.
	Notes string
	// Config is the run's config: flat keys to JSON-encodable values.
	Config map[string]any
	// Start is when the run began.
	Start time.Time
}

// Writer appends records to one offline run's transaction log.
type Writer struct {
	f     *os.File
	dir   string
	off   int64 // the file's length: where the next chunk goes
	num   int64 // the last record's number
	start time.Time
}

// Open creates the offline run directory of run under root (root/wandb/
// offline-run-<local time>-<id>/run-<id>.wandb, with files/ and logs/, and
// root/wandb/latest-run pointing at it) and writes the header and run
// records. With resumeAfter >= 0 it reopens the run's existing directory
// instead (one the program made earlier for the same id) and cuts its log
// after the last record of step resumeAfter: the history rows a killed run
// wrote past its resume point and any exit record go, so `wandb sync`
// uploads every step once. A resume without a directory for the id starts
// one.
func Open(root string, run Run, resumeAfter int) (*Writer, error) {
	if run.ID == "" {
		return nil, errors.New("wandb: empty run id")
	}
	base := filepath.Join(root, "wandb")
	if resumeAfter >= 0 {
		dirs, _ := filepath.Glob(filepath.Join(base, "offline-run-*-"+run.ID))
		sort.Strings(dirs)
		if len(dirs) > 0 {
			return reopen(dirs[len(dirs)-1], run, resumeAfter)
		}
	}
	dir := filepath.Join(base, "offline-run-"+run.Start.Local().Format("20060102_150405")+"-"+run.ID)
	for _, d := range []string{dir, filepath.Join(dir, "files"), filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("wandb: %w", err)
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, "run-"+run.ID+".wandb"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wandb: %w", err)
	}
	w := &Writer{f: f, dir: dir, start: run.Start}
	if _, err := f.Write(fileHeader); err != nil {
		f.Close()
		return nil, fmt.Errorf("wandb: %w", err)
	}
	w.off = int64(len(fileHeader))
	// Header (21) first, then the run (17), as the wandb client writes
	// them; the first run record carries a mailbox slot, without which
	// wandb sync 0.28 waits for a reply forever.
	if err := w.write(21, nil, nil); err != nil {
		f.Close()
		return nil, err
	}
	ctl := protowire.AppendTag(nil, 4, protowire.BytesType)
	ctl = protowire.AppendString(ctl, "hindsearch01")
	if err := w.write(17, runRecord(run), ctl); err != nil {
		f.Close()
		return nil, err
	}
	latest := filepath.Join(base, "latest-run")
	_ = os.Remove(latest)
	_ = os.Symlink(filepath.Base(dir), latest)
	return w, nil
}

// reopen opens an existing offline run's log and cuts it after step
// resumeAfter.
func reopen(dir string, run Run, resumeAfter int) (*Writer, error) {
	f, err := os.OpenFile(filepath.Join(dir, "run-"+run.ID+".wandb"), os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wandb: %w", err)
	}
	recs, err := Scan(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("wandb: %s: %w", f.Name(), err)
	}
	cut, kept := int64(len(fileHeader)), int64(0)
	for _, r := range recs {
		if r.Exit || (r.Step != nil && *r.Step > resumeAfter) {
			break
		}
		cut, kept = r.End, kept+1
	}
	if err := f.Truncate(cut); err != nil {
		f.Close()
		return nil, fmt.Errorf("wandb: %w", err)
	}
	start := run.Start
	for _, r := range recs {
		if r.Start != nil {
			start = *r.Start
			break
		}
	}
	return &Writer{f: f, dir: dir, off: cut, num: kept, start: start}, nil
}

// Dir is the offline run directory.
func (w *Writer) Dir() string { return w.dir }

// Log writes one history row at step (the values, with _step, _runtime
// and _timestamp, as the wandb client writes them) and a summary record
// of the same values.
func (w *Writer) Log(step int, at time.Time, kv map[string]float64) error {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var hist, sum []byte
	item := func(k, vjson string) []byte {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, 16, protowire.BytesType)
		return protowire.AppendString(b, vjson)
	}
	for _, k := range keys {
		it := item(k, jsonNumber(kv[k]))
		hist = protowire.AppendTag(hist, 1, protowire.BytesType)
		hist = protowire.AppendBytes(hist, it)
		sum = protowire.AppendTag(sum, 1, protowire.BytesType)
		sum = protowire.AppendBytes(sum, it)
	}
	runtime := at.Sub(w.start).Seconds()
	for _, it := range [][]byte{item("_step", fmt.Sprint(step)), item("_runtime", jsonNumber(runtime)),
		item("_timestamp", jsonNumber(float64(at.UnixNano())/1e9))} {
		hist = protowire.AppendTag(hist, 1, protowire.BytesType)
		hist = protowire.AppendBytes(hist, it)
	}
	st := protowire.AppendTag(nil, 1, protowire.VarintType)
	st = protowire.AppendVarint(st, uint64(int64(step)))
	hist = protowire.AppendTag(hist, 2, protowire.BytesType)
	hist = protowire.AppendBytes(hist, st)
	if err := w.write(2, hist, nil); err != nil {
		return err
	}
	return w.write(3, sum, nil)
}

// Exit writes the exit record (exit code 0: the run finished).
func (w *Writer) Exit(code int, at time.Time) error {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(int64(code)))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(int64(at.Sub(w.start).Seconds())))
	ctl := protowire.AppendTag(nil, 5, protowire.VarintType)
	ctl = protowire.AppendVarint(ctl, 1)
	return w.write(18, b, ctl)
}

// Sync flushes the log to disk.
func (w *Writer) Sync() error {
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("wandb: %w", err)
	}
	return nil
}

// Close syncs and closes the log.
func (w *Writer) Close() error {
	serr := w.f.Sync()
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("wandb: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("wandb: %w", serr)
	}
	return nil
}

// write appends Record{num (1), field: body, control (16): ctl}.
func (w *Writer) write(field protowire.Number, body, ctl []byte) error {
	w.num++
	r := protowire.AppendTag(nil, 1, protowire.VarintType)
	r = protowire.AppendVarint(r, uint64(w.num))
	r = protowire.AppendTag(r, field, protowire.BytesType)
	r = protowire.AppendBytes(r, body)
	if ctl != nil {
		r = protowire.AppendTag(r, 16, protowire.BytesType)
		r = protowire.AppendBytes(r, ctl)
	}
	return w.append(r)
}

// append writes one record as chunks: FULL when it fits the block's room,
// else FIRST, MIDDLE..., LAST; fewer than 7 bytes left in a block are
// zeros.
func (w *Writer) append(data []byte) error {
	var buf []byte
	off := w.off
	first := true
	for {
		left := blockSize - int(off%blockSize)
		if left < chunkHeader {
			buf = append(buf, make([]byte, left)...)
			off += int64(left)
			left = blockSize
		}
		n := min(len(data), left-chunkHeader)
		typ := byte(chunkMiddle)
		switch {
		case first && n == len(data):
			typ = chunkFull
		case first:
			typ = chunkFirst
		case n == len(data):
			typ = chunkLast
		}
		crc := crc32.Update(crc32.ChecksumIEEE([]byte{typ}), crc32.IEEETable, data[:n])
		buf = binary.LittleEndian.AppendUint32(buf, crc)
		buf = binary.LittleEndian.AppendUint16(buf, uint16(n))
		buf = append(buf, typ)
		buf = append(buf, data[:n]...)
		off += int64(chunkHeader + n)
		data = data[n:]
		first = false
		if len(data) == 0 {
			break
		}
	}
	if _, err := w.f.WriteAt(buf, w.off); err != nil {
		return fmt.Errorf("wandb: %w", err)
	}
	w.off = off
	return nil
}

// Record is what Scan reads of one record of a log.
type Record struct {
	// End is the file offset just past the record's last chunk.
	End int64
	// Field is the record's type (Record's oneof field number: 2
	// history, 3 summary, 17 run, 18 exit, 21 header...).
	Field protowire.Number
	// Step is a history record's _step; Exit marks an exit record;
	// Start is a run record's start_time.
	Step  *int
	Exit  bool
	Start *time.Time
}

// Scan reads a log's records (the program's own logs: for a resume).
func Scan(r io.ReaderAt) ([]Record, error) {
	head := make([]byte, len(fileHeader))
	if _, err := r.ReadAt(head, 0); err != nil || string(head) != string(fileHeader) {
		return nil, errors.New("not a W&B transaction log (bad header)")
	}
	var out []Record
	var rec []byte
	off := int64(len(fileHeader))
	hdr := make([]byte, chunkHeader)
	for {
		if left := blockSize - off%blockSize; left < chunkHeader {
			off += left
		}
		if _, err := r.ReadAt(hdr, off); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		crc, n, typ := binary.LittleEndian.Uint32(hdr), int(binary.LittleEndian.Uint16(hdr[4:])), hdr[6]
		data := make([]byte, n)
		if _, err := r.ReadAt(data, off+chunkHeader); err != nil {
			return out, nil // a torn last chunk: the records before it stand
		}
		if crc32.Update(crc32.ChecksumIEEE([]byte{typ}), crc32.IEEETable, data) != crc {
			return out, nil
		}
		off += int64(chunkHeader + n)
		rec = append(rec, data...)
		if typ != chunkFull && typ != chunkLast {
			continue
		}
		pr := parseRecord(rec)
		pr.End = off
		out = append(out, pr)
		rec = nil
	}
}

// parseRecord reads the fields Scan reports.
func parseRecord(b []byte) Record {
	var r Record
	walk(b, func(num protowire.Number, v []byte, _ uint64) {
		switch num {
		case 2:
			r.Field = num
			r.Step = historyStep(v)
		case 18:
			r.Field, r.Exit = num, true
		case 17:
			r.Field = num
			r.Start = runStart(v)
		case 3, 21:
			r.Field = num
		}
	})
	return r
}

// walk calls fn with each field of the message b: its bytes for a
// length-delimited field, its value for a varint (the other types are
// skipped). It stops at the first malformed field.
func walk(b []byte, fn func(num protowire.Number, bytes []byte, varint uint64)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return
			}
			fn(num, v, 0)
			b = b[n:]
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return
			}
			fn(num, nil, v)
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return
			}
			b = b[n:]
		}
	}
}

// historyStep is a HistoryRecord's _step item (nil without one).
func historyStep(b []byte) *int {
	var step *int
	walk(b, func(num protowire.Number, item []byte, _ uint64) {
		if num != 1 {
			return
		}
		var key, val string
		walk(item, func(n protowire.Number, v []byte, _ uint64) {
			switch n {
			case 1:
				key = string(v)
			case 16:
				val = string(v)
			}
		})
		if key == "_step" {
			var s int
			if _, err := fmt.Sscan(val, &s); err == nil {
				step = &s
			}
		}
	})
	return step
}

// runStart is a RunRecord's start_time (nil without one).
func runStart(b []byte) *time.Time {
	var t *time.Time
	walk(b, func(num protowire.Number, ts []byte, _ uint64) {
		if num != 17 {
			return
		}
		var sec, nsec uint64
		walk(ts, func(n protowire.Number, _ []byte, v uint64) {
			switch n {
			case 1:
				sec = v
			case 2:
				nsec = v
			}
		})
		u := time.Unix(int64(sec), int64(nsec))
		t = &u
	})
	return t
}

// runRecord encodes run as a RunRecord.
func runRecord(run Run) []byte {
	str := func(b []byte, n protowire.Number, s string) []byte {
		if s == "" {
			return b
		}
		b = protowire.AppendTag(b, n, protowire.BytesType)
		return protowire.AppendString(b, s)
	}
	b := str(nil, 1, run.ID)
	b = str(b, 2, run.Entity)
	b = str(b, 3, run.Project)
	keys := make([]string, 0, len(run.Config))
	for k := range run.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var cfg []byte
	for _, k := range keys {
		v, err := json.Marshal(run.Config[k])
		if err != nil {
			v, _ = json.Marshal(fmt.Sprint(run.Config[k]))
		}
		it := str(nil, 1, k)
		it = str(it, 16, string(v))
		cfg = protowire.AppendTag(cfg, 1, protowire.BytesType)
		cfg = protowire.AppendBytes(cfg, it)
	}
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendBytes(b, cfg)
	b = str(b, 6, run.Group)
	b = str(b, 8, run.Name)
	b = str(b, 9, run.Notes)
	for _, t := range run.Tags {
		b = str(b, 10, t)
	}
	if host, err := os.Hostname(); err == nil {
		b = str(b, 13, host)
	}
	ts := protowire.AppendTag(nil, 1, protowire.VarintType)
	ts = protowire.AppendVarint(ts, uint64(run.Start.Unix()))
	ts = protowire.AppendTag(ts, 2, protowire.VarintType)
	ts = protowire.AppendVarint(ts, uint64(run.Start.Nanosecond()))
	b = protowire.AppendTag(b, 17, protowire.BytesType)
	return protowire.AppendBytes(b, ts)
}

// jsonNumber is v as a JSON value (NaN and infinities, which JSON has no
// number for, as the strings Python's json writes them).
func jsonNumber(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "Infinity"
	case math.IsInf(v, -1):
		return "-Infinity"
	}
	b, _ := json.Marshal(v)
	return string(b)
}
