package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idem-data/idem/internal/lineage"
	"github.com/idem-data/idem/internal/tracing"
)

// Defaults of lineage: and tracing:, applied when the section is present.
const (
	// DefaultOpenLineageEndpoint is the path of OpenLineage's HTTP API
	// under lineage.openlineage.url (Marquez's, and most backends').
	DefaultOpenLineageEndpoint = lineage.DefaultEndpoint
	// DefaultOpenLineageTimeout bounds one event's POST.
	DefaultOpenLineageTimeout = lineage.DefaultTimeout
	// DefaultOTLPProtocol is how spans are exported.
	DefaultOTLPProtocol = tracing.ProtocolHTTP
	// DefaultSampleRatio samples every trace idem starts; a trace that
	// arrives on an event keeps its own decision.
	DefaultSampleRatio = 1.0
	// maxNamespaceChars bounds lineage.openlineage.namespace.
	maxNamespaceChars = 512
)

// Lineage says where OpenLineage run events go. Absent, idem emits none.
type Lineage struct {
	OpenLineage *OpenLineage `yaml:"openlineage,omitempty"`
}

// OpenLineage is an OpenLineage backend reached over HTTP (Marquez, or any
// server taking POST <url>/api/v1/lineage).
type OpenLineage struct {
	// URL is the backend's base URL, e.g. http://marquez:5000. Required.
	URL string `yaml:"url"`
	// Endpoint is the API's path under URL. Default
	// DefaultOpenLineageEndpoint.
	Endpoint string `yaml:"endpoint,omitempty"`
	// Namespace is the job namespace of idem's runs. Default the pipeline.
	Namespace string `yaml:"namespace,omitempty"`
	// APIKey is sent as Authorization: Bearer <key>. A secret.
	APIKey string `yaml:"api_key,omitempty" json:"-"`
	// APIKeyFile is read at Load into APIKey.
	APIKeyFile string `yaml:"api_key_file,omitempty" json:"-"`
	// Timeout bounds one event's POST. Default DefaultOpenLineageTimeout.
	Timeout Duration `yaml:"timeout,omitempty"`
}

// Tracing says where OpenTelemetry spans go. Absent, idem exports none.
type Tracing struct {
	OTLP *OTLP `yaml:"otlp,omitempty"`
	// SampleRatio is the share of the traces idem starts that are
	// sampled, 0 to 1; a trace that arrives keeps its own decision.
	// Default DefaultSampleRatio.
	SampleRatio *float64 `yaml:"sample_ratio,omitempty"`
}

// OTLP is an OpenTelemetry collector.
type OTLP struct {
	// Endpoint is host:port, or an http:// or https:// URL. Required.
	Endpoint string `yaml:"endpoint"`
	// Protocol is http/protobuf (default) or grpc.
	Protocol string `yaml:"protocol,omitempty"`
	// Insecure sends without TLS to a host:port endpoint; a URL's scheme
	// decides for itself.
	Insecure bool `yaml:"insecure,omitempty"`
	// Headers go with every export; their values are secrets (an API key).
	Headers map[string]string `yaml:"headers,omitempty" json:"-"`
}

// Ratio is SampleRatio, or DefaultSampleRatio when unset.
func (t Tracing) Ratio() float64 {
	if t.SampleRatio == nil {
		return DefaultSampleRatio
	}
	return *t.SampleRatio
}

func (c *Config) observabilityDefaults() {
	if ol := c.Lineage.OpenLineage; ol != nil {
		setDefault(&ol.Endpoint, DefaultOpenLineageEndpoint)
		setDefault(&ol.Namespace, c.Pipeline)
		if ol.Timeout == 0 {
			ol.Timeout = Duration(DefaultOpenLineageTimeout)
		}
	}
	if o := c.Tracing.OTLP; o != nil {
		setDefault(&o.Protocol, DefaultOTLPProtocol)
		if c.Tracing.SampleRatio == nil {
			r := DefaultSampleRatio
			c.Tracing.SampleRatio = &r
		}
	}
}

func (c *Config) validateObservability(v *validator) {
	if ol := c.Lineage.OpenLineage; ol != nil {
		validateOpenLineage(v, ol)
	}
	t := c.Tracing
	if t.OTLP != nil {
		validateOTLP(v, t.OTLP)
	}
	if r := t.SampleRatio; r != nil {
		switch {
		case t.OTLP == nil:
			v.add("tracing.sample_ratio", "has no effect without tracing.otlp; add tracing.otlp.endpoint or remove sample_ratio")
		case !(*r >= 0 && *r <= 1):
			v.add("tracing.sample_ratio", "%v: want a share from 0 (none of the traces idem starts) to 1 (all)", *r)
		}
	}
}

func validateOpenLineage(v *validator, ol *OpenLineage) {
	const f = "lineage.openlineage."
	if msg := httpURLProblem(ol.URL, "http://marquez:5000"); msg != "" {
		v.add(f+"url", "%s", msg)
	} else if u, _ := url.Parse(ol.URL); u.User != nil {
		v.add(f+"url", "holds user information; put the key in api_key or api_key_file instead")
	}
	if strings.ContainsAny(ol.Endpoint, "?# \t\r\n") || strings.Contains(ol.Endpoint, "://") {
		v.add(f+"endpoint", "%q is not a path; write the API's path under url, e.g. %s", ol.Endpoint, DefaultOpenLineageEndpoint)
	}
	switch ns := ol.Namespace; {
	case strings.TrimSpace(ns) == "":
		v.add(f+"namespace", "required; name the job namespace of idem's runs, e.g. the pipeline")
	case !utf8.ValidString(ns) || strings.IndexFunc(ns, unicode.IsControl) >= 0:
		v.add(f+"namespace", "holds a control character or invalid UTF-8; use printable text")
	case utf8.RuneCountInString(ns) > maxNamespaceChars:
		v.add(f+"namespace", "is %d characters long; at most %d", utf8.RuneCountInString(ns), maxNamespaceChars)
	}
	if strings.ContainsAny(ol.APIKey, "\r\n") {
		v.add(f+"api_key", "holds a line break, which cannot go in an HTTP header; check the key (or its file)")
	}
	if ol.Timeout <= 0 || ol.Timeout > Duration(5*time.Minute) {
		v.add(f+"timeout", "%s: want a positive duration up to 5m, e.g. %s", ol.Timeout, Duration(DefaultOpenLineageTimeout))
	}
}

func validateOTLP(v *validator, o *OTLP) {
	const f = "tracing.otlp."
	switch e := o.Endpoint; {
	case strings.TrimSpace(e) == "":
		v.add(f+"endpoint", "required; the collector, e.g. http://otel-collector:4318 (http/protobuf) or otel-collector:4317 (grpc)")
	case strings.Contains(e, "://"):
		if msg := httpURLProblem(e, "http://otel-collector:4318"); msg != "" {
			v.add(f+"endpoint", "%s", msg)
		} else if o.Insecure && strings.HasPrefix(e, "https://") {
			v.add(f+"insecure", "contradicts the https:// endpoint; a URL's scheme says whether to use TLS: use http:// or remove insecure")
		}
	default:
		if host, port, ok := strings.Cut(e, ":"); !ok || host == "" || !validPort(port) || strings.ContainsAny(e, "/?# \t") {
			v.add(f+"endpoint", "%q is neither host:port nor a URL; e.g. otel-collector:4317 or http://otel-collector:4318", e)
		}
	}
	switch o.Protocol {
	case tracing.ProtocolHTTP, tracing.ProtocolGRPC:
	case "http", "https", "http/json":
		v.add(f+"protocol", "%q is not supported; use http/protobuf or grpc (did you mean http/protobuf?)", o.Protocol)
	default:
		v.add(f+"protocol", "%q: choose http/protobuf or grpc", o.Protocol)
	}
	for k, val := range o.Headers {
		if k == "" || strings.IndexFunc(k, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", r) }) >= 0 {
			v.add(f+"headers", "%q is not an HTTP header name; use letters, digits and -", k)
		}
		if strings.ContainsAny(val, "\r\n") {
			v.add(f+"headers", "the value of %q holds a line break, which cannot go in a header", k)
		}
	}
}

// httpURLProblem says what is wrong with an http(s) URL, or "".
func httpURLProblem(s, example string) string {
	if strings.TrimSpace(s) == "" {
		return "required; e.g. " + example
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Sprintf("%q is not an http:// or https:// URL; e.g. %s", redactURL(s, false), example)
	}
	return ""
}

// redactObservability replaces the secrets of lineage: and tracing: in a
// copy (the config's own sections are shared pointers, left untouched).
func (c *Config) redactObservability() {
	if ol := c.Lineage.OpenLineage; ol != nil {
		cp := *ol
		cp.APIKey = redactValue(cp.APIKey)
		cp.URL = redactURL(cp.URL, false)
		if ol.URL == "" {
			cp.URL = ""
		}
		c.Lineage.OpenLineage = &cp
	}
	if o := c.Tracing.OTLP; o != nil {
		cp := *o
		if len(o.Headers) > 0 {
			cp.Headers = make(map[string]string, len(o.Headers))
			for k, v := range o.Headers {
				cp.Headers[k] = redactValue(v)
			}
		}
		cp.Endpoint = redactURL(cp.Endpoint, false)
		if !strings.Contains(o.Endpoint, "://") {
			cp.Endpoint = o.Endpoint // host:port holds no secret
		}
		c.Tracing.OTLP = &cp
	}
}
