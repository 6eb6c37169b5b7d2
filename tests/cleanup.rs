//! `pgoutbox cleanup` against a real server: poll mode deletes only rows published
//! before the cutoff, logical mode only rows the slot has confirmed — a row whose
//! transaction the relay has not confirmed survives however old it is — in batches
//! of `--batch-size`, with refusals that name the fix.

use crate::support;

use support::{wait_for, ClusterOptions, PgCluster, Pgoutbox, TestDb, WAIT};

/// Poll mode, rows published over 7 days ago, 4 rows a batch.
const POLL_7D_BY_4: [&str; 6] = [
    "--source",
    "poll",
    "--older-than",
    "7d",
    "--batch-size",
    "4",
];

/// Run `pgoutbox cleanup <args>` on `db`; (success, stdout, stderr).
fn cleanup(db: &TestDb<'_>, args: &[&str]) -> (bool, String, String) {
    let url = db.url();
    let mut all = vec!["cleanup", "--database-url", url.as_str()];
    all.extend_from_slice(args);
    let mut p = Pgoutbox::spawn(&all);
    let ok = p.wait_exit(WAIT).success();
    (ok, p.stdout_so_far().join("\n"), p.stderr())
}

fn count(db: &TestDb<'_>, filter: &str) -> u64 {
    db.psql(&format!("SELECT count(*) FROM outbox WHERE {filter}"))
        .trim()
        .parse()
        .unwrap()
}

/// Insert `n` rows tagged `tag`, created `created` ago and published `published`
/// ago (`NULL`: unpublished).
fn insert(db: &TestDb<'_>, n: u32, tag: &str, created: &str, published: &str) {
    let published = if published == "NULL" {
        "NULL".to_owned()
    } else {
        format!("now() - interval '{published}'")
    };
    let column = if db.psql("SELECT count(*) FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'published_at'").trim() == "1" {
        format!(", published_at) SELECT 'a', g::text, '{tag}', '{{}}', now() - interval '{created}', {published}")
    } else {
        format!(") SELECT 'a', g::text, '{tag}', '{{}}', now() - interval '{created}'")
    };
    db.psql(&format!(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at{column} \
         FROM generate_series(1, {n}) g"
    ));
}

#[test]
fn poll_mode_deletes_only_rows_published_before_the_cutoff_in_batches() {
    let db = PgCluster::shared().fresh_db();
    db.psql("ALTER TABLE outbox ADD COLUMN published_at timestamptz");
    // Interleaved on the heap, so each batch walks past rows that must stay.
    for _ in 0..10 {
        insert(&db, 3, "old", "20 days", "10 days");
        insert(&db, 1, "unpublished", "20 days", "NULL");
        insert(&db, 1, "recent", "20 days", "1 hour");
    }
    let (ok, out, err) = cleanup(
        &db,
        &["--source", "poll", "--older-than", "7d", "--dry-run"],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("public.outbox: would delete 30 rows (published_at before "),
        "{out}"
    );
    assert_eq!(count(&db, "true"), 50);

    let (ok, out, err) = cleanup(&db, &POLL_7D_BY_4);
    assert!(ok, "{err}");
    // 7 full batches and a short one that ends the walk.
    assert!(
        out.contains("public.outbox: deleted 30 rows (published_at before "),
        "{out}"
    );
    assert!(out.contains(" in 8 batches, "), "{out}");
    assert!(err.contains("cleanup finished"), "{err}");
    assert_eq!(count(&db, "event_type = 'old'"), 0);
    assert_eq!(count(&db, "event_type = 'unpublished'"), 10);
    assert_eq!(count(&db, "event_type = 'recent'"), 10);

    // An exact multiple: the last full batch is followed by an empty one.
    insert(&db, 8, "old", "20 days", "10 days");
    let (ok, out, _) = cleanup(&db, &POLL_7D_BY_4);
    assert!(
        ok && out.contains("deleted 8 rows") && out.contains(" in 3 batches, "),
        "{out}"
    );
    // Nothing left to do is a success too.
    let (ok, out, _) = cleanup(&db, &["--source", "poll", "--older-than", "7d"]);
    assert!(
        ok && out.contains("deleted 0 rows") && out.contains(" in 1 batches, "),
        "{out}"
    );
    assert_eq!(count(&db, "true"), 20);
}

#[test]
fn cleanup_refuses_what_it_cannot_do_safely_with_the_fix() {
    let db = PgCluster::shared().fresh_db();
    // Poll mode without the column.
    let (ok, _, err) = cleanup(&db, &["--source", "poll", "--older-than", "7d"]);
    assert!(!ok);
    assert!(
        err.contains("outbox table public.outbox has no column \"published_at\"; fix: poll mode marks published rows in published_at: `pgoutbox setup --source poll` adds it"),
        "{err}"
    );
    // Zero, unless forced.
    let (ok, _, err) = cleanup(&db, &["--source", "poll", "--older-than", "0s"]);
    assert!(!ok);
    assert!(
        err.contains("--older-than 0 would delete rows") && err.contains("--force"),
        "{err}"
    );
    // Logical mode without the slot: nothing is deleted, the fix names both ways.
    insert(&db, 5, "old", "20 days", "NULL");
    let slot = format!("{}_missing", db.name);
    let (ok, _, err) = cleanup(&db, &["--older-than", "7d", "--slot", &slot]);
    assert!(!ok);
    assert!(
        err.contains(&format!("replication slot \"{slot}\" does not exist, so cleanup cannot tell which rows the relay has delivered; fix: pass the relay's --slot (or --source poll, if the relay polls), or")),
        "{err}"
    );
    assert!(err.contains("--not-last-copy"), "{err}");
    assert_eq!(count(&db, "true"), 5);
    // Said explicitly: by age alone.
    let (ok, out, err) = cleanup(
        &db,
        &["--older-than", "7d", "--slot", &slot, "--not-last-copy"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("deleted 5 rows (created_at before "), "{out}");
    assert_eq!(count(&db, "true"), 0);
}

/// The slot has not confirmed the later rows (no relay ran): they survive cleanup
/// although older than the cutoff. Once the slot confirms past them, they go.
/// A server of its own: the slot's horizon is the oldest transaction running
/// anywhere in the cluster, which other tests would hold back at random.
#[test]
fn logical_mode_keeps_rows_the_slot_has_not_confirmed() {
    let cluster = PgCluster::start(ClusterOptions::default());
    let db = cluster.fresh_db();
    let slot = format!("{}_slot", db.name);
    insert(&db, 10, "before-slot", "30 days", "NULL");
    db.psql(&format!(
        "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"
    ));
    insert(&db, 6, "unconfirmed", "30 days", "NULL");
    insert(&db, 3, "recent", "1 hour", "NULL");

    let (ok, out, err) = cleanup(
        &db,
        &["--older-than", "7d", "--slot", &slot, "--batch-size", "4"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("deleted 10 rows (created_at before "), "{out}");
    assert!(
        out.contains(&format!("the slot \"{slot}\" has confirmed")),
        "{out}"
    );
    assert_eq!(count(&db, "event_type = 'before-slot'"), 0);
    assert_eq!(
        count(&db, "event_type = 'unconfirmed'"),
        6,
        "unconfirmed rows were deleted"
    );
    assert_eq!(count(&db, "event_type = 'recent'"), 3);

    // Confirm everything, as the relay does after Kafka acked: the horizon moves
    // once a running-xacts record (CHECKPOINT writes one) is decoded and confirmed.
    wait_for(
        "the slot's horizon to pass the unconfirmed rows",
        WAIT,
        || {
            db.psql("CHECKPOINT");
            db.psql(&format!(
                "SELECT pg_replication_slot_advance('{slot}', pg_current_wal_lsn())"
            ));
            let (_, out, _) = cleanup(&db, &["--older-than", "7d", "--slot", &slot, "--dry-run"]);
            out.contains("would delete 6 rows").then_some(())
        },
    );
    let (ok, out, err) = cleanup(&db, &["--older-than", "7d", "--slot", &slot]);
    assert!(ok, "{err}");
    assert!(out.contains("deleted 6 rows"), "{out}");
    assert_eq!(count(&db, "true"), 3);
    cluster.stop("fast");
}

/// A ctid names a row only within one partition: walking a partitioned table by
/// ctid as one heap skipped rows of a later partition whose ctids an earlier
/// partition's kept rows had (here every second one). Each leaf is walked alone.
#[test]
fn partitioned_outbox_is_cleaned_partition_by_partition() {
    let db = PgCluster::shared().fresh_db();
    db.psql(
        "CREATE TABLE parted (id bigint GENERATED ALWAYS AS IDENTITY, created_at timestamptz NOT NULL, \
                              published_at timestamptz) PARTITION BY RANGE (created_at); \
         CREATE TABLE parted_old PARTITION OF parted FOR VALUES FROM (MINVALUE) TO ('2020-01-01'); \
         CREATE TABLE parted_new PARTITION OF parted FOR VALUES FROM ('2020-01-01') TO (MAXVALUE); \
         INSERT INTO parted (created_at, published_at) \
           SELECT '2019-06-01', CASE WHEN g % 2 = 1 THEN now() - interval '10 days' END \
           FROM generate_series(1, 20) g; \
         INSERT INTO parted (created_at, published_at) \
           SELECT now(), now() - interval '10 days' FROM generate_series(1, 20) g",
    );
    let mut args = POLL_7D_BY_4.to_vec();
    args.extend(["--table", "public.parted"]);
    let (ok, out, err) = cleanup(&db, &args);
    assert!(ok, "{err}");
    assert!(
        out.contains("public.parted: deleted 30 rows (published_at before "),
        "{out}"
    );
    let left = db.psql("SELECT count(*) FROM parted WHERE published_at IS NULL");
    assert_eq!(left.trim(), "10");
    assert_eq!(db.psql("SELECT count(*) FROM parted").trim(), "10");
}
