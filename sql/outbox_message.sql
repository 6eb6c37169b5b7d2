-- outbox_emit_message: emit one outbox event as a logical decoding message, with no
-- table at all (the table-less outbox; pgoutbox run --messages-only, PostgreSQL 14+).
--
--   public.outbox_emit_message(aggregate_type text, aggregate_id text,
--                              event_type text, payload jsonb,
--                              headers jsonb DEFAULT NULL,
--                              prefix text DEFAULT 'pgoutbox') RETURNS uuid
--
-- Semantics
-- * Calls pg_logical_emit_message(true, prefix, content): a *transactional* message,
--   written to the WAL of the caller's transaction and decoded at its COMMIT, in
--   order with the transaction's rows. If the transaction (or the savepoint around
--   the call) rolls back, the event is gone and is never relayed. Nothing is stored
--   in any table: no cleanup job, no bloat.
-- * content is the JSON object pgoutbox expects (field names = the relay's mapped
--   column names, here the defaults):
--     {"id": "<uuid>", "aggregate_type": …, "aggregate_id": …, "event_type": …,
--      "payload": <any JSON>, "created_at": "<now() as ISO 8601>",
--      "headers": {"traceparent": "00-…"}}          -- headers only when given
--   so the Kafka record is the one an outbox row with the same values makes:
--   topic from aggregate_type, key aggregate_id, value payload, headers id and
--   event_type, timestamp created_at (the start of the caller's transaction), and
--   each entry of `headers` as one more Kafka header.
-- * Returns the new event id (gen_random_uuid()): consumers deduplicate on it
--   (see sql/consumer_dedup.sql).
-- * A NULL aggregate_type, aggregate_id, event_type or payload, or a `headers` that
--   is not an object of strings, raises an error: an event is never emitted half
--   made (pgoutbox would have to stop on it or dead-letter it as bad-message).
--   prefix must be one of the relay's --message-prefix values (default pgoutbox).
-- * The trade-off against an outbox table: the WAL behind the replication slot is
--   the only copy of the event until Kafka has it; nothing can be re-read or
--   replayed later from a table.
-- * Works on any PostgreSQL that has pg_logical_emit_message, but pgoutput streams
--   messages to the relay only from PostgreSQL 14 on. Runs with the caller's
--   privileges (EXECUTE on pg_logical_emit_message is granted to PUBLIC by default).
--
-- Usage
--     BEGIN;
--       UPDATE orders SET status = 'paid' WHERE id = 42;
--       SELECT outbox_emit_message('order', '42', 'OrderPaid', '{"order_id": 42}');
--     COMMIT;
--
-- Load: psql -v ON_ERROR_STOP=1 -f sql/outbox_message.sql (needs no table).
-- Re-running the file replaces the function.

CREATE OR REPLACE FUNCTION public.outbox_emit_message(
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    headers        jsonb DEFAULT NULL,
    prefix         text  DEFAULT 'pgoutbox'
) RETURNS uuid
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    new_id  uuid := gen_random_uuid();
    content jsonb;
BEGIN
    IF aggregate_type IS NULL OR aggregate_id IS NULL OR event_type IS NULL
       OR payload IS NULL THEN
        RAISE EXCEPTION 'outbox_emit_message: aggregate_type, aggregate_id, event_type and payload must not be NULL';
    END IF;
    IF prefix IS NULL OR prefix = '' THEN
        RAISE EXCEPTION 'outbox_emit_message: prefix must be one of the relay''s --message-prefix values, not empty';
    END IF;
    content := jsonb_build_object(
        'id', new_id,
        'aggregate_type', aggregate_type,
        'aggregate_id', aggregate_id,
        'event_type', event_type,
        'payload', payload,
        'created_at', now());
    IF headers IS NOT NULL THEN
        IF jsonb_typeof(headers) <> 'object' OR EXISTS (
               SELECT 1 FROM jsonb_each(headers) AS h
               WHERE jsonb_typeof(h.value) <> 'string') THEN
            RAISE EXCEPTION 'outbox_emit_message: headers must be a JSON object of string values, got %', headers;
        END IF;
        content := content || jsonb_build_object('headers', headers);
    END IF;
    PERFORM pg_logical_emit_message(true, prefix, content::text);
    RETURN new_id;
END;
$$;

COMMENT ON FUNCTION public.outbox_emit_message(text, text, text, jsonb, jsonb, text) IS
    'Emit one outbox event as a transactional logical decoding message (prefix pgoutbox) '
    'in the caller''s transaction and return its id; relayed by pgoutbox at COMMIT, never on rollback.';
