-- idem schema v13: the trace context of the load that caused a downstream
-- event (W3C traceparent, then a line break and the tracestate when there
-- is one), so the relay's publish continues that load's trace and one
-- pipeline run is one trace. NULL for results, lineage events and rows
-- written before tracing.
ALTER TABLE idem.outbox ADD COLUMN trace text;
