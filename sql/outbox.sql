-- pgoutbox default outbox table.
--
-- Semantics: the application inserts one row per domain event *in the same
-- transaction* as its business change. pgoutbox reads committed inserts from the
-- write-ahead log (logical replication, publication WITH (publish = 'insert')) and
-- publishes each row as one Kafka record:
--   topic     = --topic-template with ${routedByValue} = aggregate_type
--               (default outbox.event.<aggregate_type>)
--   key       = aggregate_id (records of one aggregate stay in order on one partition)
--   value     = payload (JSON text)
--   headers   = id, event_type
--   timestamp = created_at
-- Rolled-back transactions and rolled-back savepoints never reach Kafka.
--
-- Column meanings match Debezium's Outbox Event Router (id, aggregatetype,
-- aggregateid, type, payload), so migrating from Debezium is a column mapping.
--
-- Optional insert-then-delete pattern: because pgoutbox reads the WAL, not the
-- table, a transaction may insert the event and delete it again before COMMIT:
--     BEGIN;
--       UPDATE orders SET status = 'paid' WHERE id = 42;
--       INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
--         VALUES ('order', '42', 'OrderPaid', '{"order_id": 42}')
--         RETURNING id;  -- then: DELETE FROM outbox WHERE id = <that id>;
--     COMMIT;
-- The insert is still in the WAL and is delivered; the table stays empty, so no
-- cleanup job and no bloat. (The publication is insert-only: the DELETE is not
-- published.) Without that pattern, delete old rows periodically.
--
-- gen_random_uuid() is built in since PostgreSQL 13 (pgcrypto before).

CREATE TABLE IF NOT EXISTS public.outbox (
    id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        jsonb       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
