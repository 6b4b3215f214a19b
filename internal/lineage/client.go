package lineage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
)

// Defaults of ClientConfig.
const (
	// DefaultEndpoint is the path of OpenLineage's HTTP API under the URL.
	DefaultEndpoint = "api/v1/lineage"
	// DefaultTimeout bounds one POST, answer included.
	DefaultTimeout = 10 * time.Second
)

// ClientConfig says where events go.
type ClientConfig struct {
	// URL is the backend's base URL, http or https, e.g. http://marquez:5000.
	URL string
	// Endpoint is the path under URL. Default DefaultEndpoint.
	Endpoint string
	// APIKey, when set, is sent as Authorization: Bearer <APIKey>.
	APIKey string
	// Timeout bounds one Send. Default DefaultTimeout.
	Timeout time.Duration
	// HTTPClient sends the requests; nil means a client of its own. Its
	// Timeout, if any, applies too.
	HTTPClient *http.Client
}

// Client posts events to one backend. It is safe for concurrent use.
type Client struct {
	url     string
	apiKey  string
	timeout time.Duration
	http    *http.Client
}

// NewClient returns a client for cfg, or why cfg is wrong.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	switch {
	case err != nil:
		return nil, fmt.Errorf("lineage: url: %w", err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return nil, fmt.Errorf("lineage: url %q: want http://host:port or https://host", cfg.URL)
	case u.User != nil:
		return nil, errors.New("lineage: url: holds user information; give the key as the API key instead")
	}
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	full := u.JoinPath(endpoint)
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{url: full.String(), apiKey: cfg.APIKey, timeout: timeout, http: hc}, nil
}

// URL is where Send posts.
func (c *Client) URL() string { return c.url }

// maxErrorBody is how much of a refusal's body an error quotes; maxDrain is
// how much of an answer is read so the connection can be reused.
const (
	maxErrorBody = 512
	maxDrain     = 64 << 10
)

// Send posts one event's JSON. It tries once: nil when the backend took it
// (any 2xx), else a *SendError saying whether the event is worth sending
// again (see SendError.Fatal).
func (c *Client) Send(ctx context.Context, event []byte) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(event))
	if err != nil {
		return &SendError{Err: err, fatal: true}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "idem")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &SendError{Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
		return nil
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	return &SendError{StatusCode: resp.StatusCode, Body: printable(string(head)), fatal: fatalStatus(resp.StatusCode)}
}

// fatalStatus: a 4xx is the backend refusing this event, and sending it
// again gets the same answer, except 408 (it timed out reading) and 429
// (it asks to slow down). Anything else retries.
func fatalStatus(code int) bool {
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests
}

// SendError is a Send that did not deliver the event.
type SendError struct {
	// StatusCode is the backend's answer, 0 when there was none (a
	// timeout, a refused connection).
	StatusCode int
	// Body is the start of the answer's body, made printable.
	Body string
	// Err is the transport's error when there was no answer.
	Err   error
	fatal bool
}

func (e *SendError) Error() string {
	if e.StatusCode == 0 {
		return "lineage: sending the event: " + e.Err.Error()
	}
	msg := fmt.Sprintf("lineage: the backend answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

func (e *SendError) Unwrap() error { return e.Err }

// Fatal reports whether the event should be dropped: the backend refused
// it with a 4xx other than 408 and 429. A 5xx, a 408, a 429, a timeout or
// a network error is not fatal: send the event again later.
func (e *SendError) Fatal() bool { return e.fatal }

// printable keeps a backend's words on one line of text.
func printable(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == unicode.ReplacementChar || unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, " "))
	return strings.Join(strings.Fields(s), " ")
}
