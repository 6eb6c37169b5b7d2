-- consumer_dedup: consumer-side idempotency for events relayed by pgoutbox.
-- Create this table in the *consumer's* database (the service reading from Kafka).
--
-- Why
--   pgoutbox delivers at least once: it confirms its replication slot only after
--   Kafka has acknowledged the records, so a crash (or a restart, or a broker error)
--   after Kafka stored records but before the slot was confirmed sends those records
--   again on restart. Such duplicates are bounded by the relay's in-flight window
--   (the records sent but not yet confirmed at the moment of the crash). Consumers add
--   their own duplicates: a consumer that commits its database work and crashes
--   before committing its Kafka offset gets the same record again.
--   Every record carries the event id (public.outbox.id, a uuid in text form) in the
--   Kafka header `id`; the same event always has the same id, however often it is
--   delivered. Recording processed ids in the same transaction as the consumer's own
--   writes makes "apply the event" and "remember it was applied" atomic: a record is
--   applied exactly once, duplicates are skipped.
--
-- Semantics
--   processed_events holds one row per applied event id. Insert it with
--   ON CONFLICT DO NOTHING inside the transaction that applies the event:
--     1 row inserted -> first delivery: apply the event, COMMIT.
--     0 rows         -> already applied by a committed transaction: skip.
--   Two consumers handling the same event at once (e.g. during a rebalance): the
--   second INSERT waits for the first transaction; it reports 0 rows if that one
--   commits and 1 row if it rolls back. Commit the Kafka offset after COMMIT, and
--   also for skipped duplicates.
--
-- Example (one consumer transaction per record; $1 = the `id` header as uuid)
--     BEGIN;
--       INSERT INTO processed_events (event_id) VALUES ($1) ON CONFLICT DO NOTHING;
--       -- row count 0: duplicate, ROLLBACK (or COMMIT) and skip the record
--       -- row count 1: apply the event with the consumer's own writes, e.g.
--       UPDATE stock SET reserved = reserved + 1 WHERE sku = 'A-1';
--     COMMIT;
--     -- then commit the Kafka offset
--
-- Retention: keep ids at least as long as a record can be delivered again (Kafka
-- topic retention, or how far back you might reset consumer offsets), e.g.
--     DELETE FROM processed_events WHERE processed_at < now() - interval '30 days';
-- (an index on processed_at makes that cheap on large tables).
--
-- Load: psql -v ON_ERROR_STOP=1 -f sql/consumer_dedup.sql (re-runnable).

CREATE TABLE IF NOT EXISTS processed_events (
    event_id     uuid        PRIMARY KEY,
    processed_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE processed_events IS
    'Event ids (Kafka header id = outbox.id) already applied by this consumer; '
    'insert with ON CONFLICT DO NOTHING in the applying transaction, 0 rows = duplicate.';
