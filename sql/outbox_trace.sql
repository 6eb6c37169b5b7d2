-- outbox_trace.sql — W3C trace context on outbox rows, for `pgoutbox run --trace-context traceparent`.
--
-- Adds a nullable column `traceparent` to public.outbox whose default is the
-- transaction's setting `pgoutbox.traceparent`, so an application propagates its
-- current span without touching its INSERT statements:
--
--   BEGIN;
--   SET LOCAL pgoutbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
--   INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES (...);
--   COMMIT;
--
-- (or it writes the column itself: INSERT INTO outbox (..., traceparent) VALUES (..., $5)).
-- pgoutbox sends the value as the record header `traceparent`. Semantics:
--   * no setting (or an empty one) leaves the column NULL: the record has no trace header;
--   * SET LOCAL ends with the transaction, so one request's context never leaks into the next;
--   * a malformed value is not refused here (a broken tracer must not fail business writes):
--     pgoutbox logs it, counts it (pgoutbox_trace_context_total{outcome="invalid"}) and sends
--     the record without the header.
-- For `tracestate` too, keep a JSON object instead (a jsonb column `headers` holding
-- {"traceparent": "...", "tracestate": "..."}, with --trace-context headers) or put it in
-- the payload (--trace-context payload.meta).
-- Idempotent: safe to run again.

ALTER TABLE public.outbox
    ADD COLUMN IF NOT EXISTS traceparent text
    DEFAULT NULLIF(current_setting('pgoutbox.traceparent', true), '');
