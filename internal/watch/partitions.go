package watch

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/sources/files"
)

// Layouts of the calendar's keys, which are the canonical partition keys.
const (
	dayLayout  = "2006-01-02"
	hourLayout = "2006-01-02T15:04:05Z"
)

// calendarOf is the calendar a watch lists: the dataset's own, or every UTC
// day or hour of its partition type.
func calendarOf(t schemas.PartitionType, own *calendar.Expect) calendar.Expect {
	if own != nil {
		return *own
	}
	if t == schemas.PartitionHour {
		return calendar.Expect{Every: calendar.Hour, From: "0001-01-01T00:00:00Z"}
	}
	return calendar.Expect{Every: calendar.Day, From: "0001-01-01"}
}

// nextPeriod is the start of the period after now's: the partitions that
// started before it are the current one and those before.
func nextPeriod(c calendar.Expect, now time.Time) time.Time {
	if c.Every == calendar.Hour {
		return now.UTC().Truncate(time.Hour).Add(time.Hour)
	}
	loc := c.Location
	if loc == nil {
		loc = time.UTC
	}
	y, m, d := now.In(loc).Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, loc)
}

// Newest lists the keys of the n newest partitions of c at now, the
// current one included, oldest first; fewer when the calendar starts later.
// A partition's files may be complete before its period ends (a marker
// written at noon for the day), so the current one is listed too.
func Newest(c calendar.Expect, n int, now time.Time) []string {
	next := nextPeriod(c, now)
	var from string
	if c.Every == calendar.Hour {
		from = next.Add(-time.Duration(n) * time.Hour).Format(hourLayout)
	} else {
		y, m, d := next.Date()
		from = time.Date(y, m, d-n, 0, 0, 0, 0, next.Location()).Format(dayLayout)
	}
	// Ended lists the periods ended by its now: the last nanosecond before
	// the next period's start ends the current one.
	slots := c.Ended(next, from, "")
	if len(slots) > n {
		slots = slots[len(slots)-n:]
	}
	keys := make([]string, len(slots))
	for i, s := range slots {
		keys[i] = s.Key
	}
	return keys
}

// expected reports whether key is a partition of c that has started by now:
// what a notification may make the watch list, however old.
func expected(c calendar.Expect, key string, now time.Time) bool {
	layout := dayLayout
	if c.Every == calendar.Hour {
		layout = hourLayout
	}
	// Ended ignores a bound it cannot read, and would list every
	// partition from the calendar's first.
	if t, err := time.Parse(layout, key); err != nil || t.Format(layout) != key {
		return false
	}
	slots := c.Ended(nextPeriod(c, now), key, key)
	return len(slots) == 1 && slots[0].Key == key
}

// matcher finds the partition an object key of an s3:// source falls in,
// from the source's URL template. It parses the template only to guess;
// files.Resolve, the loads' own reading of it, must give back the very
// prefix the key starts with, or the key names no partition.
type matcher struct {
	spec   files.Spec
	typ    schemas.PartitionType
	bucket string
	re     *regexp.Regexp
	// layouts holds, per capture group, the strftime directive it reads
	// ('Y', 'm', …) or 0 for a whole {partition}.
	layouts []byte
}

func newMatcher(spec files.Spec, t schemas.PartitionType) (*matcher, error) {
	rest, ok := strings.CutPrefix(spec.URL, "s3://")
	if !ok {
		return nil, fmt.Errorf("notifications need an s3:// source, not %q", spec.URL)
	}
	bucket, tmpl, _ := strings.Cut(rest, "/")
	m := &matcher{spec: spec, typ: t, bucket: bucket}
	var re strings.Builder
	re.WriteString("^(")
	for tmpl != "" {
		i := strings.Index(tmpl, "{partition")
		if i < 0 {
			re.WriteString(regexp.QuoteMeta(tmpl))
			break
		}
		re.WriteString(regexp.QuoteMeta(tmpl[:i]))
		end := strings.IndexByte(tmpl[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("%q: a { without its }", spec.URL)
		}
		inner := tmpl[i+1 : i+end]
		tmpl = tmpl[i+end+1:]
		layout, hasLayout := strings.CutPrefix(inner, "partition:")
		if !hasLayout {
			re.WriteString(`([^/]+)`)
			m.layouts = append(m.layouts, 0)
			continue
		}
		for j := 0; j < len(layout); j++ {
			if layout[j] != '%' || j+1 == len(layout) {
				re.WriteString(regexp.QuoteMeta(layout[j : j+1]))
				continue
			}
			j++
			switch c := layout[j]; c {
			case 'Y':
				re.WriteString(`([0-9]{4})`)
			case 'j':
				re.WriteString(`([0-9]{3})`)
			case 'm', 'd', 'H', 'M', 'S':
				re.WriteString(`([0-9]{2})`)
			default: // %% and what Validate refused
				re.WriteString(regexp.QuoteMeta(string(c)))
				continue
			}
			m.layouts = append(m.layouts, layout[j])
		}
	}
	re.WriteString(")")
	r, err := regexp.Compile(re.String())
	if err != nil {
		return nil, fmt.Errorf("%q: %w", spec.URL, err)
	}
	m.re = r
	return m, nil
}

// partition is the partition whose prefix object key starts with, in
// bucket.
func (m *matcher) partition(bucket, key string) (schemas.Partition, bool) {
	if bucket != m.bucket {
		return schemas.Partition{}, false
	}
	sub := m.re.FindStringSubmatch(key)
	if sub == nil {
		return schemas.Partition{}, false
	}
	prefix := sub[1]
	whole := ""
	f := map[byte]int{'m': 1, 'd': 1}
	for i, l := range m.layouts {
		v := sub[i+2]
		if l == 0 {
			whole = v
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return schemas.Partition{}, false
		}
		f[l] = n
	}
	if whole == "" {
		t := time.Date(f['Y'], time.Month(f['m']), f['d'], f['H'], f['M'], f['S'], 0, time.UTC)
		if j, ok := f['j']; ok {
			t = time.Date(f['Y'], 1, j, f['H'], f['M'], f['S'], 0, time.UTC)
		}
		whole = t.Format(dayLayout)
		if m.typ == schemas.PartitionHour {
			whole = t.Format(hourLayout)
		}
	}
	p, err := schemas.ParsePartition(m.typ, whole)
	if err != nil {
		return schemas.Partition{}, false
	}
	if got, err := files.Resolve(m.spec, p); err != nil || got != prefix {
		return schemas.Partition{}, false
	}
	return p, true
}

// maxNotificationBytes bounds a notification read: one names a handful of
// objects.
const maxNotificationBytes = 1 << 20

// notification is the part of an S3 event notification the watch reads:
// the bucket and key of each record. Nothing else in it is trusted: a
// record only makes the watch list the partition its key falls in.
type notification struct {
	Records []struct {
		S3 struct {
			Bucket struct {
				Name string `json:"name"`
			} `json:"bucket"`
			Object struct {
				Key string `json:"key"`
			} `json:"object"`
		} `json:"s3"`
	} `json:"Records"`
}

// partitionsOf are the partitions a notification names, each once. AWS
// sends keys URL-encoded (a space as "+"), some stores as they are: both
// readings are tried, since a wrong one only costs a listing.
func (m *matcher) partitionsOf(body []byte) []schemas.Partition {
	if len(body) > maxNotificationBytes {
		return nil
	}
	var n notification
	if json.Unmarshal(body, &n) != nil {
		return nil
	}
	var out []schemas.Partition
	seen := map[string]bool{}
	for _, r := range n.Records {
		keys := []string{r.S3.Object.Key}
		if k, err := url.QueryUnescape(r.S3.Object.Key); err == nil && k != keys[0] {
			keys = append(keys, k)
		}
		for _, k := range keys {
			if p, ok := m.partition(r.S3.Bucket.Name, k); ok && !seen[p.Key] {
				seen[p.Key] = true
				out = append(out, p)
			}
		}
	}
	return out
}
