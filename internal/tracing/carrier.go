package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
)

// propagator is the W3C trace context: traceparent and tracestate.
var propagator = propagation.TraceContext{}

// HeaderCarrier is a propagation.TextMapCarrier over message headers (a nats.Header is one) that
// writes lower-case keys and reads keys in any case.
type HeaderCarrier map[string][]string

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the value of key, written in any case; an exact match wins.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set writes key in lower case, straight into the map (never through a
// method that might canonicalise it), and removes the same key written in
// another case, so a message never carries two trace contexts.
func (c HeaderCarrier) Set(key, value string) {
	lower := strings.ToLower(key)
	for k := range c {
		if k != lower && strings.EqualFold(k, lower) {
			delete(c, k)
		}
	}
	c[lower] = []string{value}
}

// Keys lists the header names, in lower case.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, strings.ToLower(k))
	}
	return keys
}

// Inject writes the trace context of ctx into h (which must not be nil):
// nothing when ctx holds no valid span context.
func Inject(ctx context.Context, h map[string][]string) {
	propagator.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx with the remote span context h names, or ctx itself
// when h names none (or an invalid one).
func Extract(ctx context.Context, h map[string][]string) context.Context {
	return propagator.Extract(ctx, HeaderCarrier(h))
}

// FromEnvironment returns ctx with the span context of the TRACEPARENT and
// TRACESTATE variables (OTel's environment carrier, which a scheduler sets
// for the command it starts); getenv is os.Getenv in a program.
func FromEnvironment(ctx context.Context, getenv func(string) string) context.Context {
	c := propagation.MapCarrier{}
	if v := getenv("TRACEPARENT"); v != "" {
		c["traceparent"] = v
	}
	if v := getenv("TRACESTATE"); v != "" {
		c["tracestate"] = v
	}
	return propagator.Extract(ctx, c)
}
