package config

import (
	"net/url"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// redacted replaces every secret in the output of Config.Redacted.
const redacted = "REDACTED"

// Redacted returns the config as YAML, safe to print or log: the NATS
// password and token, passwords inside the NATS and Postgres URLs (and a bare
// NATS token written as nats://TOKEN@host), password parameters of a
// Postgres connection string, the OpenLineage API key and the OTLP headers'
// values are replaced by "REDACTED". A URL that cannot be
// parsed is replaced whole. Paths of secret files are kept: they are not
// secrets.
func (c *Config) Redacted() string {
	cp := *c
	cp.NATS.Password = redactValue(cp.NATS.Password)
	cp.NATS.Token = redactValue(cp.NATS.Token)
	cp.NATS.URL = redactNATSURLs(cp.NATS.URL)
	cp.Postgres.URL = redactPostgres(cp.Postgres.URL)
	cp.redactObservability()
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&cp); err != nil {
		// Unreachable for this struct; never fall back to printing secrets.
		return "# config could not be printed: " + err.Error() + "\n"
	}
	_ = enc.Close()
	return b.String()
}

func redactValue(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

// redactNATSURLs redacts each URL of a comma-separated server list. NATS reads
// a user name without a password as a token, so both are secrets there.
func redactNATSURLs(s string) string {
	if s == "" {
		return ""
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if strings.Contains(p, "://") {
			parts[i] = redactURL(p, true)
		} else { // NATS accepts host:port without a scheme
			parts[i] = strings.TrimPrefix(redactURL("nats://"+p, true), "nats://")
		}
	}
	return strings.Join(parts, ",")
}

// redactURL replaces the password (and, when userIsSecret, a lone user name)
// of u, and every query parameter whose name mentions a password, token or
// secret. A URL whose user information cannot be told apart for sure (it does
// not parse, or holds a stray '@' or '#', as an unescaped password would) is
// replaced whole.
func redactURL(s string, userIsSecret bool) string {
	u, err := url.Parse(s)
	if err != nil || strings.Contains(s, "#") || u.User == nil && strings.Contains(s, "@") {
		return redacted
	}
	if u.User != nil {
		if _, hasPass := u.User.Password(); hasPass {
			u.User = url.UserPassword(u.User.Username(), redacted)
		} else if userIsSecret {
			u.User = url.User(redacted)
		}
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return redacted
		}
		for k := range q {
			if secretParam(k) {
				q[k] = []string{redacted}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func secretParam(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "password") || strings.Contains(n, "token") || strings.Contains(n, "secret") || n == "sslkey"
}

// dsnSecretRE matches secret key=value pairs of a libpq keyword/value
// connection string; the value is a single-quoted string with \' escapes or a
// run of non-space characters.
var dsnSecretRE = regexp.MustCompile(`(?i)(\b[a-z_]*(?:password|token|secret)[a-z_]*\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)

// redactPostgres redacts a Postgres URL (postgres:// or postgresql://) or a
// keyword/value connection string. Anything else holding an '@' is replaced
// whole, since it cannot be told apart.
func redactPostgres(s string) string {
	switch {
	case s == "":
		return ""
	case strings.Contains(s, "://") || strings.HasPrefix(s, "//"):
		return redactURL(s, false)
	case strings.Contains(s, "="):
		return dsnSecretRE.ReplaceAllString(s, "${1}"+redacted)
	case strings.Contains(s, "@"):
		return redacted
	}
	return s
}
