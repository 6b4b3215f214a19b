package files

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// ManifestMaxBytes bounds a manifest (and a marker) read whole.
const ManifestMaxBytes = 16 << 20

// Readiness is what the ready rule says of a partition: ready, with the
// files to load, or waiting, with why.
type Readiness struct {
	Ready bool
	// Reason says which rule decided, in words for people: "marker _SUCCESS
	// not found", "last file changed 2m0s ago, quiet_for 10m0s".
	Reason string
	// URL is the partition prefix.
	URL string
	// Listing is the files to load, when Ready.
	Listing Listing
	// Signal is the marker or manifest object that made the partition
	// ready, for the audit; nil for the other rules.
	Signal *File
}

// Err is nil when r is ready, and a transient *NotReadyError otherwise.
func (r Readiness) Err() error {
	if r.Ready {
		return nil
	}
	return &NotReadyError{URL: r.URL, Reason: r.Reason}
}

// Ready applies spec's ready rule to the partition prefix (from Resolve)
// and lists the files to load. A rule that is not met gives a Readiness
// that is not Ready, not an error. Errors are the store's, a
// *ManifestError, or a *MissingFilesError when the source has no ready
// rule and no file is there.
//
// With a marker or quiet_for rule the files are those at the prefix that
// match spec.Pattern; with a manifest, exactly those it names, wherever
// they are in the store, and Pattern is not applied.
func Ready(ctx context.Context, store Store, spec Spec, prefix string, now time.Time) (Readiness, error) {
	spec = spec.WithDefaults()
	r := Readiness{URL: store.URL(prefix)}
	rule := spec.Ready
	switch {
	case rule.Manifest != "":
		return readyManifest(ctx, store, spec, prefix, r)
	case rule.Marker != "":
		marker, err := store.Stat(ctx, prefix+rule.Marker)
		if errors.Is(err, ErrNotFound) {
			r.Reason = fmt.Sprintf("marker %s not found", rule.Marker)
			return r, nil
		}
		if err != nil {
			return r, err
		}
		files, err := List(ctx, store, spec, prefix)
		if err != nil {
			return r, err
		}
		r.Ready, r.Signal = true, &marker
		r.Reason = fmt.Sprintf("marker %s found, %d files", rule.Marker, len(files))
		r.Listing = NewListing(prefix, files)
		return r, nil
	case rule.QuietFor > 0:
		files, err := List(ctx, store, spec, prefix)
		if err != nil {
			return r, err
		}
		if len(files) < rule.MinFiles {
			r.Reason = fmt.Sprintf("%d files, min_files %d", len(files), rule.MinFiles)
			return r, nil
		}
		var last time.Time
		for _, f := range files {
			if f.ModTime.After(last) {
				last = f.ModTime
			}
		}
		switch age := now.Sub(last); {
		case age < 0:
			r.Reason = fmt.Sprintf("last file is dated %s after now (the store's clock is ahead), quiet_for %s", (-age).Round(time.Second), rule.QuietFor)
			return r, nil
		case age < rule.QuietFor:
			r.Reason = fmt.Sprintf("last file changed %s ago, quiet_for %s", age.Round(time.Second), rule.QuietFor)
			return r, nil
		}
		r.Ready = true
		r.Reason = fmt.Sprintf("%d files, none changed for %s, quiet_for %s", len(files), now.Sub(last).Round(time.Second), rule.QuietFor)
		r.Listing = NewListing(prefix, files)
		return r, nil
	default:
		files, err := List(ctx, store, spec, prefix)
		if err != nil {
			return r, err
		}
		if len(files) == 0 {
			return r, &MissingFilesError{URL: store.URL(prefix), Pattern: spec.Pattern}
		}
		r.Ready = true
		r.Reason = fmt.Sprintf("%d files; no ready rule, the event says the partition is ready", len(files))
		r.Listing = NewListing(prefix, files)
		return r, nil
	}
}

// List returns the files of the partition at prefix that spec.Pattern
// selects, visiting only the levels the pattern reaches: one List call per
// matching sub-prefix, never the whole tree. The ready rule's own marker
// or manifest is never one of them.
func List(ctx context.Context, store Store, spec Spec, prefix string) ([]File, error) {
	segs := []string{"*"}
	if spec.Pattern != "" {
		segs = strings.Split(spec.Pattern, "/")
	}
	var out []File
	var walk func(prefix string, depth int) error
	walk = func(dir string, depth int) error {
		d, err := store.List(ctx, dir)
		if err != nil {
			return err
		}
		last := depth == len(segs)-1
		if last {
			for _, f := range d.Files {
				name := f.Key[len(dir):]
				if hidden(name) || dir == prefix && (name == spec.Ready.Marker || name == spec.Ready.Manifest) {
					continue
				}
				if ok, _ := path.Match(segs[depth], name); ok {
					out = append(out, f)
				}
			}
			return nil
		}
		for _, p := range d.Prefixes {
			name := strings.TrimSuffix(p[len(dir):], "/")
			if hidden(name) {
				continue
			}
			if ok, _ := path.Match(segs[depth], name); ok {
				if err := walk(p, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(prefix, 0); err != nil {
		return nil, err
	}
	return out, nil
}

// hidden names are the writers' own: _SUCCESS, _committed_*, .part.crc,
// .tmp files of an upload in progress.
func hidden(name string) bool {
	return name == "" || name[0] == '_' || name[0] == '.'
}

// manifest is the Redshift COPY manifest format (UNLOAD writes the meta).
type manifest struct {
	Entries []struct {
		URL       string `json:"url"`
		Mandatory bool   `json:"mandatory"`
		Meta      struct {
			ContentLength *int64 `json:"content_length"`
		} `json:"meta"`
	} `json:"entries"`
}

func readyManifest(ctx context.Context, store Store, spec Spec, prefix string, r Readiness) (Readiness, error) {
	name := spec.Ready.Manifest
	body, mf, err := store.Get(ctx, prefix+name, ManifestMaxBytes)
	if errors.Is(err, ErrNotFound) {
		r.Reason = fmt.Sprintf("manifest %s not found", name)
		return r, nil
	}
	if err != nil {
		return r, err
	}
	var m manifest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&m); err != nil {
		return r, &ManifestError{URL: mf.URL, Problems: []string{fmt.Sprintf(`not a manifest ({"entries":[{"url":…}]}): %v`, err)}}
	}
	// The prefix's own files, listed once, give most entries' identity; an
	// entry elsewhere costs a HEAD.
	here := map[string]File{}
	d, err := store.List(ctx, prefix)
	if err != nil {
		return r, err
	}
	for _, f := range d.Files {
		here[f.Key] = f
	}
	base := store.URL("")
	var files []File
	var missing, problems []string
	seen := map[string]bool{}
	for _, e := range m.Entries {
		key, ok := strings.CutPrefix(e.URL, base)
		if !ok || key == "" || strings.HasSuffix(key, "/") {
			problems = append(problems, fmt.Sprintf("entry %q is not a file in %s", e.URL, base))
			continue
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		f, ok := here[key]
		if !ok {
			f, err = store.Stat(ctx, key)
			if errors.Is(err, ErrNotFound) {
				if e.Mandatory {
					missing = append(missing, e.URL)
				}
				continue
			}
			if err != nil {
				return r, err
			}
		}
		if n := e.Meta.ContentLength; n != nil && *n != f.Size {
			problems = append(problems, fmt.Sprintf("%s is %d bytes, the manifest says %d", e.URL, f.Size, *n))
			continue
		}
		files = append(files, f)
	}
	if len(missing) > 0 {
		problems = append([]string{fmt.Sprintf("manifest names %d files, %d mandatory missing: %s",
			len(m.Entries), len(missing), strings.Join(missing, ", "))}, problems...)
	}
	if len(problems) > 0 {
		return r, &ManifestError{URL: mf.URL, Problems: problems}
	}
	r.Ready, r.Signal = true, &mf
	r.Reason = fmt.Sprintf("manifest %s names %d files", name, len(files))
	r.Listing = NewListing(prefix, files)
	return r, nil
}
