-- outbox_emit: write one event into public.outbox from SQL, optionally without
-- leaving a row behind.
--
--   public.outbox_emit(aggregate_type text, aggregate_id text, event_type text,
--                      payload jsonb, keep boolean DEFAULT true) RETURNS uuid
--
-- Semantics
-- * Inserts one row into public.outbox (id = gen_random_uuid(), created_at = now(),
--   i.e. the start time of the caller's transaction) and returns the new id. That id
--   is what the relay sends as the Kafka header `id`; consumers deduplicate on it
--   (see sql/consumer_dedup.sql).
-- * It runs inside the caller's transaction and never commits: call it in the same
--   transaction as the business change. If that transaction (or the savepoint around
--   the call) rolls back, the event is gone too and is never relayed.
-- * keep => false deletes the row again in the same transaction (insert-then-delete).
--   pgoutbox reads committed changes from the WAL, not from the table, and its
--   publication is insert-only (WITH (publish = 'insert')): the INSERT is still in the
--   WAL and is relayed to Kafka after COMMIT, the DELETE is not published. The table
--   stays empty (other sessions never see the row), so with keep => false no cleanup
--   job is needed (sql/outbox_cleanup.sql is for keep => true) and the table does
--   not bloat beyond what autovacuum reclaims.
--   Trade-off: with keep => false the WAL behind the replication slot is the only
--   copy of an event until Kafka has it; there is nothing to re-read from the table
--   if the slot is ever dropped or invalidated (wal_status = 'lost', see
--   sql/outbox_backlog.sql). keep => true leaves the row for audits and replays.
-- * keep => NULL is rejected (ambiguous); a NULL aggregate_type, aggregate_id,
--   event_type or payload fails on the table's NOT NULL constraints, so an event is
--   never silently dropped.
-- * Runs with the caller's privileges: the caller needs INSERT on public.outbox,
--   plus DELETE for keep => false.
--
-- Usage
--     BEGIN;
--       UPDATE orders SET status = 'paid' WHERE id = 42;
--       SELECT outbox_emit('order', '42', 'OrderPaid', '{"order_id": 42}');
--       -- or, leaving no row in the table:
--       SELECT outbox_emit('order', '42', 'OrderPaid', '{"order_id": 42}', keep => false);
--     COMMIT;
--
-- Load: psql -v ON_ERROR_STOP=1 -f sql/outbox_emit.sql (after sql/outbox.sql).
-- Re-running the file replaces the function.

CREATE OR REPLACE FUNCTION public.outbox_emit(
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    keep           boolean DEFAULT true
) RETURNS uuid
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    new_id uuid;
BEGIN
    IF keep IS NULL THEN
        RAISE EXCEPTION 'outbox_emit: keep must be true or false, not NULL';
    END IF;

    INSERT INTO public.outbox AS o (aggregate_type, aggregate_id, event_type, payload)
    VALUES (outbox_emit.aggregate_type, outbox_emit.aggregate_id,
            outbox_emit.event_type, outbox_emit.payload)
    RETURNING o.id INTO new_id;

    IF NOT keep THEN
        -- The INSERT above is already in the WAL; this only empties the table.
        DELETE FROM public.outbox AS o WHERE o.id = new_id;
    END IF;

    RETURN new_id;
END;
$$;

COMMENT ON FUNCTION public.outbox_emit(text, text, text, jsonb, boolean) IS
    'Insert one event into public.outbox in the caller''s transaction and return its id; '
    'keep => false deletes it again in the same transaction (still relayed from the WAL).';
