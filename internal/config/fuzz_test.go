package config

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzParse checks that no input makes Parse, Validate or Redacted panic, that
// Validate's error is always Problems, and that what Redacted prints holds no
// secret where a secret goes.
func FuzzParse(f *testing.F) {
	f.Add(specYAML)
	f.Add("")
	f.Add("pipeline: p\ndatasets:\n  a:\n    strategy: merge\n    then: [a, b]\n  b: {then: [a]}\n")
	f.Add("nats:\n  ack_wait: 10\n  password: Sekr3t\n  token: t\n  url: nats://x:Sekr3t@h,tok@h2\n")
	f.Add("postgres:\n  url: postgres://u:p@h/d?password=x\n")
	f.Add("postgres:\n  url: host=h password='a b'\n")
	f.Add("datasets:\n  a:\n    source: \"SELECT now(), 'today', @x /* @y */\"\n")
	f.Add("datasets: [1, 2]\n")
	f.Add("a: &x [*x]\n")
	f.Fuzz(func(t *testing.T, data string) {
		c, err := Parse([]byte(data), nil)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			var p Problems
			if !errors.As(err, &p) || len(p) == 0 {
				t.Fatalf("Validate returned %T %v", err, err)
			}
		}
		out := c.Redacted()
		var back Config
		if err := yaml.Unmarshal([]byte(out), &back); err != nil {
			t.Fatalf("Redacted is not YAML: %v\n%s", err, out)
		}
		for _, s := range []string{back.NATS.Password, back.NATS.Token} {
			if s != "" && s != redacted {
				t.Fatalf("secret %q printed:\n%s", s, out)
			}
		}
		for _, raw := range append(strings.Split(back.NATS.URL, ","), back.Postgres.URL) {
			if u, err := url.Parse(strings.TrimSpace(raw)); err == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok && pw != redacted {
					t.Fatalf("URL password %q printed:\n%s", pw, out)
				}
			}
		}
		for _, name := range c.DatasetNames() {
			d := c.Datasets[name]
			d.TargetTable()
			d.ViewName()
			if d.MaxAttempts() < 1 {
				t.Fatalf("MaxAttempts %d", d.MaxAttempts())
			}
		}
	})
}
