-- outbox_backlog: one view to watch the relay's replication slot(s) and the outbox
-- table. Needs PostgreSQL 13+ (wal_status, safe_wal_size).
--
--   SELECT * FROM public.outbox_backlog;
--
-- One row per logical replication slot of the current database whose output plugin
-- is pgoutput (the relay's slot, `pgoutbox` by default; `temporary` marks the
-- short-lived slots of `pgoutbox tail`). When no such slot exists the view still
-- returns one row, with slot_name NULL, so the table figures are always visible and
-- "slot missing" is a condition you can alert on.
--
-- Columns
--   slot_name, active, active_pid, temporary   from pg_replication_slots
--   confirmed_flush_lsn  everything before it is acknowledged by Kafka
--   lag_bytes            current WAL position - confirmed_flush_lsn: WAL written
--                        (by the whole cluster, not only the outbox) that the relay has
--                        not confirmed yet; lag_pretty is pg_size_pretty of it. On a
--                        standby the "current position" is the last replayed LSN.
--   retained_bytes       current WAL position - restart_lsn: WAL kept on disk because
--                        of this slot (what actually fills pg_wal)
--   wal_status           reserved / extended: fine; unreserved: the slot is about to
--                        exceed max_slot_wal_keep_size and will be invalidated at the
--                        next checkpoint; lost: invalidated, the relay cannot continue
--   safe_wal_size        bytes that can still be written before the slot is at risk
--                        (NULL when max_slot_wal_keep_size = -1, i.e. unlimited: then
--                        the disk is the limit)
--   outbox_rows, oldest_created_at, oldest_row_age   of public.outbox
--
-- Relay lag is lag_bytes, not the age of the oldest row: pgoutbox reads the WAL, so
-- a row is relayed whether or not it is still in the table, and rows stay until a
-- cleanup deletes them (sql/outbox_cleanup.sql). With outbox_emit(..., keep => false)
-- the table is always empty. oldest_row_age only tells whether cleanup is running:
-- it should stay below older_than plus the cleanup schedule's period.
--
-- Alerting (poll every 15-60 s; thresholds are examples)
--   * slot_name IS NULL                         slot missing (dropped, or never set up)
--   * NOT active for more than a few minutes    relay down: lag and retained WAL grow
--   * lag_bytes > 1 GB (tune to write rate)     relay behind or blocked (Kafka down);
--     an idle relay confirms keepalives, so lag stays near zero on an idle outbox
--   * wal_status = 'unreserved'                 page now: invalidation is imminent
--   * wal_status = 'lost'                       slot invalidated; the relay stops
--                                               (fails closed); events not yet
--                                               relayed must be recovered by hand
--   * safe_wal_size < 20% of max_slot_wal_keep_size
--   * oldest_row_age > older_than + 1 day       cleanup job not running
--   e.g.  SELECT slot_name, active, lag_pretty, wal_status FROM public.outbox_backlog
--         WHERE NOT temporary AND (NOT active OR lag_bytes > 1073741824
--               OR wal_status IN ('unreserved', 'lost'));
--
-- Cost: outbox_rows and oldest_created_at scan public.outbox. That is free with
-- keep => false (empty table) and cheap after regular cleanup; on a table holding
-- millions of rows, poll less often or drop those columns.
-- The view runs with its owner's rights on public.outbox; a monitoring role needs
-- only: GRANT SELECT ON public.outbox_backlog TO monitoring;
--
-- Load: psql -v ON_ERROR_STOP=1 -f sql/outbox_backlog.sql (after sql/outbox.sql).
-- Re-running the file replaces the view.

CREATE OR REPLACE VIEW public.outbox_backlog AS
WITH pos AS (
    SELECT CASE WHEN pg_catalog.pg_is_in_recovery()
                THEN pg_catalog.pg_last_wal_replay_lsn()
                ELSE pg_catalog.pg_current_wal_lsn()
           END AS lsn
), tbl AS (
    SELECT count(*) AS outbox_rows, min(o.created_at) AS oldest_created_at
    FROM public.outbox AS o
)
SELECT s.slot_name::text                                     AS slot_name,
       s.active,
       s.active_pid,
       s.temporary,
       s.confirmed_flush_lsn,
       (pos.lsn - s.confirmed_flush_lsn)::bigint             AS lag_bytes,
       pg_catalog.pg_size_pretty(pos.lsn - s.confirmed_flush_lsn) AS lag_pretty,
       (pos.lsn - s.restart_lsn)::bigint                     AS retained_bytes,
       s.wal_status,
       s.safe_wal_size,
       tbl.outbox_rows,
       tbl.oldest_created_at,
       now() - tbl.oldest_created_at                         AS oldest_row_age
FROM tbl
CROSS JOIN pos
LEFT JOIN pg_catalog.pg_replication_slots AS s
       ON s.slot_type = 'logical'
      AND s.plugin = 'pgoutput'
      AND s.database = pg_catalog.current_database()
ORDER BY s.slot_name;

COMMENT ON VIEW public.outbox_backlog IS
    'Per pgoutput slot of this database: activity, unconfirmed WAL (lag_bytes), WAL '
    'status; plus row count and oldest row of public.outbox (cleanup health, not relay lag).';
