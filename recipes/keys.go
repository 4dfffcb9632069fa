package recipes

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// EnvPrefix starts the name of every environment variable that overrides a
// recipe key: ORCH_ followed by the key path in upper case with dots
// replaced by underscores (train.steps: ORCH_TRAIN_STEPS).
const EnvPrefix = "ORCH_"

// field is one leaf key of the schema: a scalar, a list or a map.
type field struct {
	key   string       // full key path, e.g. "hindsight.gold_answer"
	typ   reflect.Type // the Go type of the field
	index []int        // reflect field index path from Recipe
}

// schema returns every leaf field of Recipe in declaration order. It is
// computed on each call: the package keeps no state.
func schema() []field {
	var out []field
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			tag, _, _ := strings.Cut(sf.Tag.Get("mapstructure"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			key := tag
			if prefix != "" {
				key = prefix + "." + tag
			}
			idx := append(append([]int(nil), index...), i)
			if sf.Type.Kind() == reflect.Struct {
				walk(sf.Type, key, idx)
				continue
			}
			out = append(out, field{key: key, typ: sf.Type, index: idx})
		}
	}
	walk(reflect.TypeOf(Recipe{}), "", nil)
	return out
}

// Keys returns the path of every leaf key of the schema, in schema order
// (the order of recipe.go, which is also the order of YAML output). A map
// key such as eval.datasets is listed once; its entries are addressed as
// eval.datasets.NAME by --set and as ORCH_EVAL_DATASETS_NAME in the
// environment.
func Keys() []string {
	fs := schema()
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = f.key
	}
	return keys
}

// EnvName returns the environment variable that overrides key, e.g.
// ORCH_HINDSIGHT_GOLD_ANSWER for hindsight.gold_answer.
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// typeError says a value does not have the type a key wants.
type typeError struct {
	want string
	got  any
}

func (e *typeError) Error() string {
	return fmt.Sprintf("expected %s, got %s", e.want, describe(e.got))
}

// typeName names t the way error messages and docs do.
func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "int"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	case reflect.Map:
		return "map of " + typeName(t.Elem()) + "s"
	case reflect.Struct:
		return "map"
	}
	return t.String()
}

// describe renders a decoded YAML value for an error message.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(x)
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Map:
		return "a map"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return fmt.Sprint(v)
}

// parseValue converts a --set or environment value to the Go type t: bools
// by strconv.ParseBool, ints and numbers in decimal, lists as
// comma-separated items (trimmed, empty items dropped; "" is the empty
// list), strings as they are.
func parseValue(t reflect.Type, s string) (any, error) {
	bad := &typeError{want: typeName(t), got: s}
	switch t.Kind() {
	case reflect.String:
		return s, nil
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return nil, bad
		}
		return b, nil
	case reflect.Int, reflect.Int64:
		i, err := strconv.ParseInt(strings.TrimSpace(s), 10, t.Bits())
		if err != nil {
			return nil, bad
		}
		return reflect.ValueOf(i).Convert(t).Interface(), nil
	case reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return nil, bad
		}
		return f, nil
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.String:
			items := []string{}
			for item := range strings.SplitSeq(s, ",") {
				if item = strings.TrimSpace(item); item != "" {
					items = append(items, item)
				}
			}
			return items, nil
		case reflect.Int64:
			items := []int64{}
			for item := range strings.SplitSeq(s, ",") {
				if item = strings.TrimSpace(item); item != "" {
					i, err := strconv.ParseInt(item, 10, 64)
					if err != nil {
						return nil, bad
					}
					items = append(items, i)
				}
			}
			return items, nil
		}
	}
	return nil, fmt.Errorf("cannot set a %s from text", typeName(t))
}

// typeAt returns the type at a mapstructure error name such as
// "train.data[0]" or "eval.datasets[nq]", and whether it was found.
func typeAt(name string) (reflect.Type, bool) {
	t := reflect.TypeOf(Recipe{})
	for _, seg := range splitName(name) {
		if t = childType(t, seg); t == nil {
			return nil, false
		}
	}
	return t, true
}

// splitName splits a mapstructure name ("train.data[0]",
// "eval.datasets[nq]") into its segments.
func splitName(name string) []string {
	var segs []string
	for part := range strings.SplitSeq(name, ".") {
		for part != "" {
			open := strings.IndexByte(part, '[')
			if open < 0 {
				segs = append(segs, part)
				break
			}
			if open > 0 {
				segs = append(segs, part[:open])
			}
			end := strings.IndexByte(part[open:], ']')
			if end < 0 {
				segs = append(segs, part[open+1:])
				break
			}
			segs = append(segs, part[open+1:open+end])
			part = part[open+end+1:]
		}
	}
	return segs
}

// displayKey turns a mapstructure name into a recipe key path: map entries
// become dotted (eval.datasets.nq); list indexes stay (train.data[0]).
func displayKey(name string) string {
	t := reflect.TypeOf(Recipe{})
	var b strings.Builder
	for i, seg := range splitName(name) {
		switch {
		case t != nil && t.Kind() == reflect.Slice:
			fmt.Fprintf(&b, "[%s]", seg)
			t = t.Elem()
			continue
		case i > 0:
			b.WriteByte('.')
		}
		b.WriteString(seg)
		t = childType(t, seg)
	}
	return b.String()
}

// childType steps from t into seg, or returns nil when it cannot.
func childType(t reflect.Type, seg string) reflect.Type {
	if t == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("mapstructure"), ",")
			if strings.EqualFold(tag, seg) {
				return t.Field(i).Type
			}
		}
	case reflect.Map, reflect.Slice:
		return t.Elem()
	}
	return nil
}
