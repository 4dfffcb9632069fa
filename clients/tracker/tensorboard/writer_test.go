package tensorboard

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// CRC-32C's check value, and TFRecord's mask of it.
func TestMaskedCRC(t *testing.T) {
	if c := crc32.Checksum([]byte("123456789"), castagnoli); c != 0xe3069283 {
		t.Fatalf("crc32c %#x", c)
	}
	c := uint32(0xe3069283)
	if got, want := masked([]byte("123456789")), ((c>>15)|(c<<17))+0xa282ead8; got != want {
		t.Errorf("masked %#x, want %#x", got, want)
	}
}

// events reads a file's TFRecords, checking both CRCs, into each event's
// step and its fields' numbers.
func events(t *testing.T, path string) (steps []int64, fields [][]protowire.Number, scalars map[string]float32) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	scalars = map[string]float32{}
	for len(b) > 0 {
		n := binary.LittleEndian.Uint64(b)
		if binary.LittleEndian.Uint32(b[8:]) != masked(b[:8]) {
			t.Fatal("bad length crc")
		}
		data := b[12 : 12+n]
		if binary.LittleEndian.Uint32(b[12+n:]) != masked(data) {
			t.Fatal("bad data crc")
		}
		b = b[16+n:]
		var step int64
		var fs []protowire.Number
		for len(data) > 0 {
			num, typ, k := protowire.ConsumeTag(data)
			data = data[k:]
			fs = append(fs, num)
			switch typ {
			case protowire.VarintType:
				v, k := protowire.ConsumeVarint(data)
				step, data = int64(v), data[k:]
			case protowire.BytesType:
				v, k := protowire.ConsumeBytes(data)
				data = data[k:]
				if num == 5 { // summary: values {tag, simple_value}
					for len(v) > 0 {
						_, _, k := protowire.ConsumeTag(v)
						val, k2 := protowire.ConsumeBytes(v[k:])
						v = v[k+k2:]
						var tag string
						var x float32
						for len(val) > 0 {
							vn, vt, k := protowire.ConsumeTag(val)
							val = val[k:]
							switch {
							case vn == 1 && vt == protowire.BytesType:
								s, k := protowire.ConsumeString(val)
								tag, val = s, val[k:]
							case vn == 2 && vt == protowire.Fixed32Type:
								u, k := protowire.ConsumeFixed32(val)
								x, val = math.Float32frombits(u), val[k:]
							default:
								k := protowire.ConsumeFieldValue(vn, vt, val)
								val = val[k:]
							}
						}
						scalars[tag] = x
					}
				}
			default:
				k := protowire.ConsumeFieldValue(num, typ, data)
				data = data[k:]
			}
		}
		steps = append(steps, step)
		fields = append(fields, fs)
	}
	return steps, fields, scalars
}

// A file starts with the file version, holds the scalars and text written,
// and a restarted writer's file sorts after the first and starts with a
// SessionLog START at its step.
func TestEventFiles(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1_800_000_000, 0)
	w, err := Open(dir, -1, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Text(0, now, "recipe", "name: x"); err != nil {
		t.Fatal(err)
	}
	if err := w.Scalars(3, now, map[string]float64{"a": 0.5, "b/c": 2}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	steps, fields, scalars := events(t, w.Path())
	if len(steps) != 3 || fields[0][1] != 3 || steps[2] != 3 || scalars["a"] != 0.5 || scalars["b/c"] != 2 {
		t.Fatalf("steps %v fields %v scalars %v", steps, fields, scalars)
	}
	w2, err := Open(dir, 4, now) // the same second: still sorts later
	if err != nil {
		t.Fatal(err)
	}
	w2.Close()
	if filepath.Base(w2.Path()) <= filepath.Base(w.Path()) {
		t.Errorf("%s does not sort after %s", w2.Path(), w.Path())
	}
	steps, fields, _ = events(t, w2.Path())
	if len(steps) != 2 || steps[1] != 4 || fields[1][2] != 7 {
		t.Errorf("restart file: steps %v fields %v, want a session_log (7) at step 4", steps, fields)
	}
}
