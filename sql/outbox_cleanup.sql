-- outbox_cleanup: delete old rows from public.outbox in batches.
--
-- This or `pgoutbox cleanup`?
--   This file: SQL only (pg_cron, psql from cron), no pgoutbox binary needed; deletes
--   by created_at alone. Right for the logical mode while the slot is healthy (see
--   "Why deleting is safe" below). Wrong for poll mode (run --source poll): it would
--   delete rows that are not published yet.
--   `pgoutbox cleanup --older-than 7d`: asks the slot instead of trusting a margin of
--   time — in the logical mode it deletes only rows whose transaction the slot has
--   confirmed (finished before its catalog_xmin), so an unrelayed row survives however
--   old it is, and it refuses when the slot is missing or lost; in poll mode
--   (--source poll) it deletes only rows whose published_at is older than the cutoff.
--   Same batching (short transactions, a summary of rows, batches, time and the
--   longest batch). Prefer it for poll mode and whenever the relay may be down longer
--   than the cutoff.
--
--   public.outbox_cleanup(older_than interval DEFAULT '7 days',
--                         batch_size int DEFAULT 10000) RETURNS bigint
--   CALL public.outbox_cleanup_batched(older_than, batch_size)   -- returns `deleted`
--
-- Semantics
-- * Deletes every row whose created_at is earlier than now() - older_than, at most
--   batch_size rows per DELETE statement (ctid batches, no index needed), until a
--   batch comes back short; returns the number of rows deleted. Rows newer than the
--   cutoff are never touched. older_than must be >= 0 and batch_size >= 1.
-- * outbox_cleanup is a function, so it runs in the caller's transaction and cannot
--   commit: all batches of one call commit (or roll back) together. batch_size bounds
--   each DELETE statement, not the transaction. To commit after every batch (short
--   transactions, WAL and dead tuples handed to vacuum as you go, e.g. for the first
--   cleanup of a table that grew large), use the procedure outbox_cleanup_batched,
--   which takes the same arguments and must be CALLed outside an explicit transaction.
-- * Only needed when events are written with keep => true (plain INSERTs, or
--   outbox_emit(..., keep => true)); with the insert-then-delete pattern
--   (outbox_emit(..., keep => false)) the table stays empty.
--
-- Why deleting is safe
--   pgoutbox reads committed inserts from the write-ahead log through its logical
--   replication slot, never from the table, and its publication is insert-only, so
--   these DELETEs are not published. A deleted row was either already relayed (and
--   acknowledged by Kafka) or its INSERT is still in the WAL that the slot retains
--   behind confirmed_flush_lsn, and will be relayed from there. The only case where
--   the table row would be the last copy is a slot that was dropped or invalidated
--   (wal_status = 'lost'); pgoutbox stops (fails closed) then. Keep older_than well
--   above any outage you would repair by hand, and check sql/outbox_backlog.sql
--   before cleaning up after such an incident.
--
-- Scheduling (run it at least as often as you want rows to live beyond older_than)
--   pg_cron, in the database that holds the outbox (or cron.schedule_in_database):
--     SELECT cron.schedule('pgoutbox-outbox-cleanup', '17 3 * * *',
--                          $$CALL public.outbox_cleanup_batched('7 days', 10000)$$);
--     -- or, one transaction: $$SELECT public.outbox_cleanup('7 days')$$
--   crontab, with psql:
--     17 3 * * *  psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -c "CALL public.outbox_cleanup_batched('7 days', 10000)"
--
--   Each batch finds its rows with a sequential scan that stops after batch_size
--   matches. On a very large table, an index makes the search cheap at the price of
--   one more index update per event:
--     CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_created_at_idx ON public.outbox (created_at);
--
-- Load: psql -v ON_ERROR_STOP=1 -f sql/outbox_cleanup.sql (after sql/outbox.sql).
-- Re-running the file replaces the function and the procedure.

CREATE OR REPLACE FUNCTION public.outbox_cleanup(
    older_than interval DEFAULT '7 days',
    batch_size int      DEFAULT 10000
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    cutoff  timestamptz;
    total   bigint := 0;
    deleted bigint;
BEGIN
    IF older_than IS NULL OR older_than < interval '0' THEN
        RAISE EXCEPTION 'outbox_cleanup: older_than must be a non-negative interval, got %',
            coalesce(older_than::text, 'NULL');
    END IF;
    IF batch_size IS NULL OR batch_size < 1 THEN
        RAISE EXCEPTION 'outbox_cleanup: batch_size must be at least 1, got %',
            coalesce(batch_size::text, 'NULL');
    END IF;
    cutoff := now() - older_than;

    LOOP
        DELETE FROM public.outbox
        WHERE ctid = ANY (ARRAY(
            SELECT o.ctid FROM public.outbox AS o
            WHERE o.created_at < cutoff
            LIMIT batch_size));
        GET DIAGNOSTICS deleted = ROW_COUNT;
        total := total + deleted;
        EXIT WHEN deleted < batch_size;
    END LOOP;

    RETURN total;
END;
$$;

COMMENT ON FUNCTION public.outbox_cleanup(interval, int) IS
    'Delete public.outbox rows with created_at < now() - older_than, batch_size rows per '
    'statement, in the caller''s transaction; returns the number deleted.';

CREATE OR REPLACE PROCEDURE public.outbox_cleanup_batched(
    older_than    interval DEFAULT '7 days',
    batch_size    int      DEFAULT 10000,
    INOUT deleted bigint   DEFAULT 0
)
LANGUAGE plpgsql
AS $$
DECLARE
    cutoff timestamptz;
    n      bigint;
BEGIN
    IF older_than IS NULL OR older_than < interval '0' THEN
        RAISE EXCEPTION 'outbox_cleanup_batched: older_than must be a non-negative interval, got %',
            coalesce(older_than::text, 'NULL');
    END IF;
    IF batch_size IS NULL OR batch_size < 1 THEN
        RAISE EXCEPTION 'outbox_cleanup_batched: batch_size must be at least 1, got %',
            coalesce(batch_size::text, 'NULL');
    END IF;
    -- Fixed once: now() moves on with every COMMIT below.
    cutoff := now() - older_than;
    deleted := coalesce(deleted, 0);

    LOOP
        DELETE FROM public.outbox
        WHERE ctid = ANY (ARRAY(
            SELECT o.ctid FROM public.outbox AS o
            WHERE o.created_at < cutoff
            LIMIT batch_size));
        GET DIAGNOSTICS n = ROW_COUNT;
        deleted := deleted + n;
        COMMIT;
        EXIT WHEN n < batch_size;
    END LOOP;
END;
$$;

COMMENT ON PROCEDURE public.outbox_cleanup_batched(interval, int, bigint) IS
    'Like outbox_cleanup, but commits after every batch; CALL it outside a transaction block.';
