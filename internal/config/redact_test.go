package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func TestRedacted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("Tok3n-From-File\n"), 0o600))

	// Each secret is distinctive, so finding it anywhere in the output is a leak.
	tests := []struct {
		name    string
		yaml    string
		env     map[string]string
		secrets []string
		keep    []string // must still be shown
	}{
		{
			name:    "nats password and postgres url password",
			yaml:    "nats:\n  user: loader\n  password: Pa55-Inline\npostgres:\n  url: postgres://idem:Db-Pa55@db:5432/w?sslmode=require\n",
			secrets: []string{"Pa55-Inline", "Db-Pa55"},
			keep:    []string{"user: loader", "postgres://idem:REDACTED@db:5432/w?sslmode=require"},
		},
		{
			name:    "token file",
			yaml:    "nats:\n  token_file: " + filepath.Join(dir, "token") + "\n",
			secrets: []string{"Tok3n-From-File"},
			keep:    []string{"token: REDACTED", "token_file: " + filepath.Join(dir, "token")},
		},
		{
			name:    "environment secrets",
			yaml:    "pipeline: p\n",
			env:     map[string]string{"IDEM_NATS_PASSWORD": "Env-Pa55", "IDEM_NATS_TOKEN": "Env-Tok3n", "IDEM_DATABASE_URL": "postgresql://u:Env-Db-Pa55@h/d"},
			secrets: []string{"Env-Pa55", "Env-Tok3n", "Env-Db-Pa55"},
		},
		{
			name:    "nats url user and password, list of servers",
			yaml:    "nats:\n  url: nats://admin:Nats-Url-Pa55@n1:4222, tls://Tok3n-In-Url@n2:4222,n3:4222\n",
			secrets: []string{"Nats-Url-Pa55", "Tok3n-In-Url"},
			keep:    []string{"nats://admin:REDACTED@n1:4222", "tls://REDACTED@n2:4222", "n3:4222"},
		},
		{
			name:    "nats url without scheme",
			yaml:    "nats:\n  url: u:No-Scheme-Pa55@localhost:4222\n",
			secrets: []string{"No-Scheme-Pa55"},
		},
		{
			name:    "postgres password in query",
			yaml:    "postgres:\n  url: postgres://db/w?user=u&password=Query-Pa55&sslpassword=Ssl-Pa55\n",
			secrets: []string{"Query-Pa55", "Ssl-Pa55"},
			keep:    []string{"user=u"},
		},
		{
			name:    "postgres keyword/value string",
			yaml:    "postgres:\n  url: \"host=db user=u password=Kv-Pa55 dbname=w\"\n",
			secrets: []string{"Kv-Pa55"},
			keep:    []string{"host=db user=u password=REDACTED dbname=w"},
		},
		{
			name:    "postgres keyword/value quoted password",
			yaml:    "postgres:\n  url: \"host=db password = 'Kv Quoted \\\\' Pa55' dbname=w\"\n",
			secrets: []string{"Kv Quoted", "Pa55"},
			keep:    []string{"dbname=w"},
		},
		{
			name:    "unescaped password with at sign",
			yaml:    "postgres:\n  url: postgres://u:At@Sign-Pa55@db/w\n",
			secrets: []string{"Sign-Pa55"},
		},
		{
			name:    "unescaped password with hash",
			yaml:    "postgres:\n  url: postgres://u:1234#5678@db/w\n",
			secrets: []string{"1234#5678", "5678"},
		},
		{
			name:    "openlineage api key, url and otlp headers",
			yaml:    "lineage:\n  openlineage:\n    url: http://marquez:5000/?token=Url-Tok3n\n    api_key: Ol-Key-5ecret\ntracing:\n  otlp:\n    endpoint: https://otel:4318\n    headers:\n      authorization: Bearer Otlp-5ecret\n",
			secrets: []string{"Ol-Key-5ecret", "Otlp-5ecret", "Url-Tok3n"},
			keep:    []string{"api_key: REDACTED", "authorization: REDACTED", "endpoint: https://otel:4318", "url: http://marquez:5000/?token=REDACTED"},
		},
		{
			name:    "openlineage api key file",
			yaml:    "lineage:\n  openlineage:\n    url: http://marquez:5000\n    api_key_file: " + filepath.Join(dir, "token") + "\n",
			secrets: []string{"Tok3n-From-File"},
			keep:    []string{"api_key: REDACTED", "api_key_file: " + filepath.Join(dir, "token")},
		},
		{
			name:    "escaped password",
			yaml:    "postgres:\n  url: postgres://u:Esc%40ped-Pa55@db/w\n",
			secrets: []string{"Esc%40ped-Pa55", "Esc@ped-Pa55", "ped-Pa55"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte(tt.yaml), func(k string) string { return tt.env[k] })
			require.NoError(t, err)
			out := c.Redacted()
			for _, s := range tt.secrets {
				require.NotContains(t, out, s)
			}
			for _, k := range tt.keep {
				require.Contains(t, out, k)
			}
			// The output is YAML that reads back as a config.
			var back Config
			require.NoError(t, yaml.Unmarshal([]byte(out), &back))
		})
	}
}

func TestRedactedKeepsConfig(t *testing.T) {
	t.Parallel()
	c := parseSpec(t)
	out := c.Redacted()
	require.NotContains(t, out, "n4ts-pa55")
	require.Equal(t, "n4ts-pa55", c.NATS.Password, "Redacted does not change the config")

	// Apart from the secret, the printed config is the config.
	back, err := Parse([]byte(out), nil)
	require.NoError(t, err)
	require.Equal(t, "REDACTED", back.NATS.Password)
	back.NATS.Password = c.NATS.Password
	require.Equal(t, c, back)
	require.True(t, strings.HasPrefix(out, "pipeline: shop\nnats:\n  url: "), out)
}
