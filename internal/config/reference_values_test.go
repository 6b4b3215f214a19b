package config

// What the generator of docs/CONFIGURATION.md reads from running the
// config's code: defaults, environment overrides, and which dataset keys
// each strategy requires or refuses.

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// formatValue writes a value as it is written in YAML.
func formatValue(v reflect.Value) string {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		v = v.Elem()
	}
	switch v.Type() {
	case durationType:
		return shortDuration(time.Duration(v.Int()))
	case reflect.TypeFor[Retention]():
		return v.Interface().(Retention).String()
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'f', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

// shortDuration is d as time.Duration writes it, without zero units: 2m,
// not 2m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// leafValues formats every non-zero scalar of the struct v by YAML path;
// datasets are left out (see referenceDefaults).
func leafValues(v reflect.Value, path string, out map[string]string) {
	for i := range v.NumField() {
		key := yamlKey(v.Type().Field(i))
		fv := v.Field(i)
		for key != "" && fv.Kind() == reflect.Pointer && !fv.IsNil() {
			fv = fv.Elem()
		}
		switch {
		case key == "" || fv.Kind() == reflect.Pointer || fv.Kind() == reflect.Map || fv.Kind() == reflect.Slice:
		case isMapping(fv.Type()):
			leafValues(fv, join(path, key), out)
		case !fv.IsZero():
			out[join(path, key)] = formatValue(fv)
		}
	}
}

// referenceDefaults is every default by YAML path, as the page shows it:
// withDefaultsFills and referenceImplicitDefaults.
func referenceDefaults() map[string]string {
	out := withDefaultsFills()
	for p, f := range referenceImplicitDefaults {
		out[p] = code(formatValue(reflect.ValueOf(f())))
	}
	return out
}

// withDefaultsFills is what WithDefaults fills in a config where every
// section is present and one dataset of each strategy is declared, by
// YAML path; a dataset default that only some strategies get names them.
// The pipeline is <pipeline>, so a default taken from it reads so.
func withDefaultsFills() map[string]string {
	c := &Config{
		Pipeline: "<pipeline>",
		Lineage:  Lineage{OpenLineage: &OpenLineage{}},
		Tracing:  Tracing{OTLP: &OTLP{}},
		Datasets: map[string]*Dataset{},
	}
	for _, s := range Strategies {
		c.Datasets[string(s)] = &Dataset{Strategy: s, Expect: &Expect{}, Watch: &Watch{}, Recheck: &Recheck{}}
	}
	before := map[string]string{}
	leafValues(reflect.ValueOf(c).Elem(), "", before)
	c.WithDefaults()
	after := map[string]string{}
	leafValues(reflect.ValueOf(c).Elem(), "", after)
	out := map[string]string{}
	for p, v := range after {
		if _, set := before[p]; !set {
			out[p] = code(v)
		}
	}
	perStrategy := map[string]map[string][]string{} // path -> value -> strategies
	for _, s := range Strategies {
		d := c.Datasets[string(s)]
		b, a := map[string]string{}, map[string]string{}
		leafValues(reflect.ValueOf(Dataset{Strategy: s, Expect: &Expect{}, Watch: &Watch{}, Recheck: &Recheck{}}), "datasets.<name>", b)
		leafValues(reflect.ValueOf(d).Elem(), "datasets.<name>", a)
		for p, v := range a {
			if _, set := b[p]; set {
				continue
			}
			if perStrategy[p] == nil {
				perStrategy[p] = map[string][]string{}
			}
			perStrategy[p][v] = append(perStrategy[p][v], string(s))
		}
	}
	for p, byValue := range perStrategy {
		var parts []string
		for v, ss := range byValue {
			part := code(v)
			if len(ss) < len(Strategies) {
				part += " (" + strings.Join(ss, ", ") + ")"
			}
			parts = append(parts, part)
		}
		sort.Strings(parts)
		out[p] = strings.Join(parts, "; ")
	}
	return out
}

// referenceEnv maps each key to the variable that overrides it: applyEnv
// is asked which variables it reads, then given each alone.
func referenceEnv() map[string]string {
	var names []string
	(&Config{}).applyEnv(func(n string) string { names = append(names, n); return "" })
	out := map[string]string{}
	for _, n := range names {
		c := &Config{}
		c.applyEnv(func(m string) string {
			if m == n {
				return "7"
			}
			return ""
		})
		set := map[string]string{}
		leafValues(reflect.ValueOf(c).Elem(), "", set)
		for p := range set {
			out[p] = n
		}
	}
	return out
}

// sample sets v to a non-zero value that names key: a string c_<key>, a
// list of one, true, 1 (1s for a duration), a new struct.
func sample(v reflect.Value, key string) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		sample(v.Elem(), key)
	case reflect.String:
		v.SetString("c_" + key)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		sample(s.Index(0), key)
		v.Set(s)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		if v.Type() == durationType {
			v.SetInt(int64(time.Second))
		} else {
			v.SetInt(1)
		}
	case reflect.Float64:
		v.SetFloat(0.5)
	}
}

// Strategy matrix cells.
const (
	cellRequired = "required"
	cellOptional = "optional"
	cellRefused  = "—"
)

// strategyMatrix asks Validate, for each strategy, which dataset keys it
// requires (a minimal dataset lacking them is refused with "required") and
// which it refuses ("does not apply"); it returns the keys some strategy
// treats apart, with a cell per strategy.
func strategyMatrix() ([]string, map[string]map[Strategy]string, error) {
	problems := func(d *Dataset) Problems {
		c := &Config{Pipeline: "p", Datasets: map[string]*Dataset{"d": d}}
		c.WithDefaults()
		var p Problems
		if err := c.Validate(); err != nil {
			p = err.(Problems)
		}
		return p
	}
	field := func(d *Dataset, key string) reflect.Value {
		for f := range reflect.TypeFor[Dataset]().Fields() {
			if yamlKey(f) == key {
				return reflect.ValueOf(d).Elem().FieldByIndex(f.Index)
			}
		}
		panic("no dataset key " + key)
	}
	setSample := func(d *Dataset, key string) {
		if vals, ok := referenceEnums["datasets.<name>."+key]; ok {
			field(d, key).SetString(vals[0])
			return
		}
		sample(field(d, key), key)
	}
	cells := map[string]map[Strategy]string{}
	var keys []string
	for _, s := range Strategies {
		base := &Dataset{Strategy: s, Target: "c_schema.c_target", Source: Source{SQL: "SELECT 1 WHERE c = @partition"}}
		required := map[string]bool{}
		for range 5 {
			var missing []string
			for _, p := range problems(base) {
				if strings.HasPrefix(p.Message, "required") && p.Dataset == "d" {
					missing = append(missing, p.Field)
				}
			}
			if len(missing) == 0 {
				break
			}
			for _, k := range missing {
				required[k] = true
				setSample(base, k)
			}
		}
		if p := problems(base); len(p) > 0 {
			return nil, nil, fmt.Errorf("a minimal %s dataset is refused: %v", s, p)
		}
		for f := range reflect.TypeFor[Dataset]().Fields() {
			key := yamlKey(f)
			if key == "" || key == "strategy" {
				continue
			}
			cell := cellOptional
			if required[key] {
				cell = cellRequired
			} else {
				d := *base
				setSample(&d, key)
				for _, p := range problems(&d) {
					if p.Field == key && strings.Contains(p.Message, "does not apply") {
						cell = cellRefused
					}
				}
			}
			if cells[key] == nil {
				cells[key] = map[Strategy]string{}
				keys = append(keys, key)
			}
			cells[key][s] = cell
		}
	}
	keys = slices.DeleteFunc(keys, func(k string) bool {
		for _, s := range Strategies {
			if cells[k][s] != cellOptional {
				return false
			}
		}
		return true
	})
	return keys, cells, nil
}
