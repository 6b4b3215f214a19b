package lineage

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The event attributes a scheduler sets to name the run that published the
// event (see the package doc for Airflow's macros).
const (
	AttrParentID           = "openlineage_parent_id"
	AttrParentJobNamespace = "openlineage_parent_job_namespace"
	AttrParentJobName      = "openlineage_parent_job_name"
	AttrParentRunID        = "openlineage_parent_run_id"

	AttrRootParentID           = "openlineage_root_parent_id"
	AttrRootParentJobNamespace = "openlineage_root_parent_job_namespace"
	AttrRootParentJobName      = "openlineage_root_parent_job_name"
	AttrRootParentRunID        = "openlineage_root_parent_run_id"
)

// MaxRefChars bounds a parent's job namespace and job name, in characters.
const MaxRefChars = 512

// RunRef names a run of a job elsewhere.
type RunRef struct {
	Namespace, Name, RunID string
}

// Parent is the run that spawned a load and, when given, the root of its
// hierarchy.
type Parent struct {
	RunRef
	Root *RunRef
}

// Facet is p as a parent run facet.
func (p *Parent) Facet(producer string) *ParentRunFacet {
	if p == nil {
		return nil
	}
	f := &ParentRunFacet{
		BaseFacet: BaseFacet{producer, ParentRunFacetSchemaURL},
		Run:       ParentRun{RunID: p.RunID},
		Job:       ParentJob{Namespace: p.Namespace, Name: p.Name},
	}
	if p.Root != nil {
		f.Root = &ParentRoot{
			Run: ParentRun{RunID: p.Root.RunID},
			Job: ParentJob{Namespace: p.Root.Namespace, Name: p.Root.Name},
		}
	}
	return f
}

// Ignored is an attribute ParentFromAttributes could not use, and why, for
// the log: the load goes on without it.
type Ignored struct {
	Attribute string
	Reason    string
}

func (i Ignored) String() string { return i.Attribute + ": " + i.Reason }

type refAttrs struct {
	combined, namespace, name, runID string
}

var (
	parentAttrs = refAttrs{AttrParentID, AttrParentJobNamespace, AttrParentJobName, AttrParentRunID}
	rootAttrs   = refAttrs{AttrRootParentID, AttrRootParentJobNamespace, AttrRootParentJobName, AttrRootParentRunID}
)

// ParentFromAttributes reads the parent run, and its root, from an event's
// attributes. It returns nil when none names a usable parent, and every
// attribute it had to ignore with the reason; it never fails.
func ParentFromAttributes(attrs map[string]string) (*Parent, []Ignored) {
	var ignored []Ignored
	parent := readRef(attrs, parentAttrs, &ignored)
	root := readRef(attrs, rootAttrs, &ignored)
	if parent == nil {
		if root != nil {
			ignored = append(ignored, Ignored{rootAttrs.present(attrs), "names a root run but no parent run; set " + AttrParentID + " too"})
		}
		return nil, ignored
	}
	return &Parent{RunRef: *parent, Root: root}, ignored
}

// present is the first of a's attributes that attrs holds.
func (a refAttrs) present(attrs map[string]string) string {
	for _, k := range []string{a.combined, a.namespace, a.name, a.runID} {
		if _, ok := attrs[k]; ok {
			return k
		}
	}
	return a.combined
}

// readRef reads one reference, from the three attributes apart when they
// are all there, else from the combined one.
func readRef(attrs map[string]string, a refAttrs, ignored *[]Ignored) *RunRef {
	ns, hasNS := attrs[a.namespace]
	name, hasName := attrs[a.name]
	runID, hasRun := attrs[a.runID]
	combined, hasCombined := attrs[a.combined]

	var apart *RunRef
	switch {
	case hasNS && hasName && hasRun:
		ref, field, why := checkRef(ns, name, runID)
		if why == "" {
			apart = &ref
		} else {
			*ignored = append(*ignored, Ignored{[]string{a.namespace, a.name, a.runID}[field], why})
		}
	case hasNS || hasName || hasRun:
		var missing []string
		for _, m := range []struct {
			key string
			has bool
		}{{a.namespace, hasNS}, {a.name, hasName}, {a.runID, hasRun}} {
			if !m.has {
				missing = append(missing, m.key)
			}
		}
		key := a.namespace
		if !hasNS {
			key = a.name
			if !hasName {
				key = a.runID
			}
		}
		*ignored = append(*ignored, Ignored{key, "needs " + strings.Join(missing, " and ") + " as well"})
	}
	if !hasCombined {
		return apart
	}
	parts := strings.Split(combined, "/")
	if len(parts) != 3 {
		if apart == nil {
			*ignored = append(*ignored, Ignored{a.combined, fmt.Sprintf("want namespace/job_name/run_id, three parts separated by \"/\", found %d; a namespace or job name holding \"/\" needs %s, %s and %s", len(parts), a.namespace, a.name, a.runID)})
		}
		return apart
	}
	ref, _, why := checkRef(parts[0], parts[1], parts[2])
	switch {
	case apart != nil && why == "" && ref == *apart:
	case apart != nil:
		*ignored = append(*ignored, Ignored{a.combined, "differs from " + a.namespace + ", " + a.name + " and " + a.runID + ", which are used instead"})
	case why != "":
		*ignored = append(*ignored, Ignored{a.combined, why})
	default:
		return &ref
	}
	return apart
}

// checkRef validates and normalises one reference; field is which part is
// wrong (0 namespace, 1 name, 2 run id) and why says how, empty when it is
// right.
func checkRef(ns, name, runID string) (ref RunRef, field int, why string) {
	if why := checkText("the job namespace", ns); why != "" {
		return ref, 0, why
	}
	if why := checkText("the job name", name); why != "" {
		return ref, 1, why
	}
	id, ok := canonicalUUID(runID)
	if !ok {
		return ref, 2, fmt.Sprintf("the run id %s is not a UUID (8-4-4-4-12 hexadecimal digits, not all zero)", quoteShort(runID))
	}
	return RunRef{Namespace: ns, Name: name, RunID: id}, 0, ""
}

func checkText(what, s string) string {
	switch {
	case s == "":
		return what + " is empty"
	case !utf8.ValidString(s):
		return what + " is not valid UTF-8"
	case utf8.RuneCountInString(s) > MaxRefChars:
		return fmt.Sprintf("%s is %d characters long; at most %d", what, utf8.RuneCountInString(s), MaxRefChars)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return what + " holds a control character"
	}
	return ""
}

// quoteShort quotes s for a reason, cut to a readable length.
func quoteShort(s string) string {
	const max = 40
	if utf8.RuneCountInString(s) > max {
		r := []rune(s)
		return fmt.Sprintf("%q...", string(r[:max]))
	}
	return fmt.Sprintf("%q", s)
}
