//! `pgoutbox check`: a preflight that inspects everything the relay depends on and
//! reports every problem at once, each with the exact fix.
//!
//! Owns the list of checks and their verdicts; printing (`render`, `to_json`) is data
//! only, `main.rs` decides where it goes. The checks, in report order:
//!
//! ```text
//!  connection ─┬─ server_version, wal_level, max_replication_slots, max_wal_senders   (server.rs)
//!              ├─ role_replication, role_login                                       (server.rs)
//!              ├─ table, columns, select_privilege            per outbox table       (objects.rs)
//!              ├─ publication, publication_operations, publication_tables,
//!              │  publication_partition_root, publication_columns                    (objects.rs)
//!              ├─ messages, publication_empty (--messages-only)                      (messages.rs)
//!              ├─ slot, slot_wal_status                                              (objects.rs)
//!              ├─ tail_publication  per publication a killed tail left behind        (objects.rs)
//!              ├─ slot_failover, synchronized_standby_slots (17+)                    (failover.rs)
//!              └─ max_slot_wal_keep_size                                             (server.rs)
//!  topic_template  per outbox table (no connection needed)                            (settings.rs)
//!  kafka  (only with brokers, with run's --kafka-option settings; runs even when
//!          PostgreSQL is unreachable)                                                  (settings.rs)
//!  delivery  the mode run would be in (always passes; names the transactional id)    (delivery.rs)
//!  watermark_topic  (exactly-once with brokers: exists and compacted; never created)  (delivery.rs)
//! ```
//!
//! With `--source poll` ([`CheckMode::Poll`]) the PostgreSQL part is instead
//! `connection`, `server_version`, `role_login`, the table checks, and per table
//! `published_at`, `unpublished_index`, `poll_order`, `poll_privileges`, `notify_trigger`
//! (poll.rs); nothing about wal_level, replication, publication or slot.
//!
//! Invariants:
//! - `check` never fails and never stops early: a query that fails becomes a failed
//!   check naming the query error, and later checks still run. Only a failed
//!   connection ends the PostgreSQL part (nothing else can be inspected without it).
//! - `check` only reads: it never creates, alters or drops anything.
//! - `ok = false` means the relay cannot work (or will lose its position) as things
//!   are, and `run` cannot repair it itself: what `run` creates on its own (a missing
//!   slot; a missing publication when the role may create it) passes with a note. Conditions that work but deserve attention — a publication that also
//!   publishes updates and deletes (decoded by the server, ignored by the relay), a
//!   `wal_status` of `unreserved`, an unlimited `max_slot_wal_keep_size` — are
//!   `ok = true` with the caveat in `observed` and the suggested change in `fix`.

mod delivery;
mod failover;
mod layout;
mod messages;
mod objects;
mod poll;
mod server;
mod settings;

use serde::Serialize;

pub use poll::PUBLISHED_COLUMN;

use crate::kafka::config::KafkaOptions;
use crate::pg::client::conninfo::ConnInfo;
use crate::pg::names::TableName;
use crate::pg::source::catalog::{self, CatalogError};

/// Which relay mode to check for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CheckMode {
    /// Logical replication: wal_level, REPLICATION, publication, slot.
    #[default]
    Logical,
    /// Polling ([`poll`]): the outbox table's published_at column, its partial index,
    /// the ordering column, the privileges to claim and mark rows, the NOTIFY trigger.
    Poll {
        /// `--poll-mark`.
        mark: PollMark,
        /// `--poll-order-by`: the column rows are claimed in order of.
        order_by: String,
    },
}

/// How poll mode marks a published row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PollMark {
    /// `published_at = now()`: needs the column, the partial index, UPDATE on it.
    #[default]
    Published,
    /// `DELETE`: needs DELETE (and UPDATE on a column for `FOR UPDATE`).
    Delete,
}

/// What to check.
#[derive(Debug, Clone)]
pub struct CheckInput {
    /// The relay mode (`--source`).
    pub mode: CheckMode,
    /// The ordinary (non-replication) connection; the same role the relay uses.
    pub conninfo: ConnInfo,
    /// Publication the relay streams.
    pub publication: String,
    /// Outbox tables.
    pub tables: Vec<TableName>,
    /// Replication slot the relay uses.
    pub slot: String,
    /// `--slot-failover`: whether the slot should be a failover slot (17+).
    pub slot_failover: bool,
    /// Mapped column names every outbox table must have (id, key, payload, …).
    pub columns: Vec<String>,
    /// Kafka bootstrap servers; the broker check runs only when set.
    pub brokers: Option<String>,
    /// The librdkafka settings `run` uses (TLS, SASL, …), for the broker check.
    pub kafka_options: KafkaOptions,
    /// Each outbox table's topic template as given, and where it was set.
    pub templates: Vec<TemplateInput>,
    /// Logical decoding message prefixes relayed as events (`--message-prefix`).
    pub message_prefixes: Vec<String>,
    /// `--messages-only`: no outbox table, an empty publication, PostgreSQL 14+.
    pub messages_only: bool,
    /// `--delivery exactly-once` and its settings; `None` is at-least-once.
    pub delivery: Option<crate::pipeline::exactly_once::ExactlyOnceConfig>,
}

/// One table's topic template, unvalidated.
#[derive(Debug, Clone)]
pub struct TemplateInput {
    /// The table it routes.
    pub table: TableName,
    /// The template text.
    pub template: String,
    /// Where it was set (`--topic-template`, a config-file section).
    pub origin: String,
}

/// One verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What kind of check, e.g. `wal_level`, `publication`, `slot`.
    pub name: String,
    /// What was checked: `server`, a role, a table, the publication, the slot, the brokers.
    pub object: String,
    /// Whether the relay can work with what was observed.
    pub ok: bool,
    /// What was found, in words.
    pub observed: String,
    /// The exact SQL or action: required when `!ok`, a suggestion when `ok`.
    pub fix: Option<String>,
}

impl Check {
    pub(crate) fn pass(name: &str, object: impl Into<String>, observed: impl Into<String>) -> Self {
        Check {
            name: name.to_owned(),
            object: object.into(),
            ok: true,
            observed: observed.into(),
            fix: None,
        }
    }

    pub(crate) fn fail(
        name: &str,
        object: impl Into<String>,
        observed: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Check {
            name: name.to_owned(),
            object: object.into(),
            ok: false,
            observed: observed.into(),
            fix: Some(fix.into()),
        }
    }

    /// Attach a suggestion to a passing check.
    pub(crate) fn suggest(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// A check whose query failed: the failure is the observation.
    pub(crate) fn query_failed(
        name: &str,
        object: impl Into<String>,
        err: &tokio_postgres::Error,
    ) -> Self {
        Check::fail(
            name,
            object,
            format!("query failed: {}", catalog::describe(err)),
            "run the check as the role the relay uses; if the error persists, see the PostgreSQL server log",
        )
    }
}

/// Every verdict of one run, in the order the checks ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// The verdicts.
    pub checks: Vec<Check>,
}

impl CheckReport {
    /// Whether every check passed.
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The checks that failed.
    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.ok)
    }

    /// The first check called `name` about `object`.
    pub fn find(&self, name: &str, object: &str) -> Option<&Check> {
        self.checks
            .iter()
            .find(|c| c.name == name && c.object == object)
    }

    /// `{"ok": bool, "checks": [{"name", "object", "ok", "observed", "fix"}, …]}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "ok": self.ok(), "checks": self.checks })
    }

    /// One line per check: `✔ name: object = observed` (plus `— suggestion: …` when a
    /// passing check has one) or `✘ name: object = observed — fix: …`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            let (mark, label) = if c.ok {
                ('✔', "suggestion")
            } else {
                ('✘', "fix")
            };
            out.push_str(&format!("{mark} {}: {} = {}", c.name, c.object, c.observed));
            if let Some(fix) = &c.fix {
                out.push_str(&format!(" — {label}: {fix}"));
            }
            out.push('\n');
        }
        out
    }
}

/// Run every check (see the module docs for the list and the order).
pub async fn check(input: &CheckInput) -> CheckReport {
    let mut checks = Vec::new();
    let mut transactional_id = None;
    match catalog::connect(&input.conninfo).await {
        Ok(client) => {
            postgres_checks(&client, input, &mut checks).await;
            transactional_id = derived_transactional_id(&client, input).await;
        }
        Err(err) => checks.push(Check::fail(
            "connection",
            input.conninfo.redacted(),
            // The object already names the target; the observation is the cause.
            match &err {
                CatalogError::Connect { error, .. } => catalog::describe(error),
                other => crate::report::render(other),
            },
            "check host, port, dbname, user, the password (PGPASSWORD or ~/.pgpass), sslmode, \
             and that the server's pg_hba.conf admits this role from this host",
        )),
    }
    checks.extend(input.templates.iter().map(settings::template_check));
    if let Some(brokers) = &input.brokers {
        checks.push(settings::kafka_check(brokers, &input.kafka_options).await);
    }
    let exactly_once = input.delivery.as_ref();
    checks.push(delivery::mode_check(
        exactly_once,
        transactional_id.as_deref(),
    ));
    if let (Some(brokers), Some(cfg)) = (&input.brokers, exactly_once) {
        checks.push(delivery::watermark_check(brokers, &input.kafka_options, cfg).await);
    }
    CheckReport { checks }
}

/// The transactional id `run --delivery exactly-once` would derive (system
/// identifier, database, slot); `None` in at-least-once mode, or when the role may
/// not read `pg_control_system()`.
async fn derived_transactional_id(
    client: &tokio_postgres::Client,
    input: &CheckInput,
) -> Option<String> {
    let cfg = input.delivery.as_ref()?;
    let row = client
        .query_one(
            "SELECT system_identifier::text, current_database()::text FROM pg_control_system()",
            &[],
        )
        .await
        .ok()?;
    Some(cfg.transactional_id(
        &row.get::<_, String>(0),
        &row.get::<_, String>(1),
        &input.slot,
    ))
}

async fn postgres_checks(
    client: &tokio_postgres::Client,
    input: &CheckInput,
    checks: &mut Vec<Check>,
) {
    let facts = match server::facts(client).await {
        Ok(facts) => facts,
        Err(err) => {
            checks.push(Check::query_failed(
                "connection",
                input.conninfo.redacted(),
                &err,
            ));
            return;
        }
    };
    checks.push(Check::pass(
        "connection",
        input.conninfo.redacted(),
        format!(
            "connected as {} to database {} (PostgreSQL {})",
            facts.role, facts.database, facts.version
        ),
    ));
    if let CheckMode::Poll { mark, order_by } = &input.mode {
        // No wal_level, REPLICATION, publication or slot: poll mode reads the table.
        checks.push(server::version_check(&facts));
        let roles = server::role_checks(client, &facts.role).await;
        checks.extend(roles.into_iter().filter(|c| c.name != "role_replication"));
        let tables = objects::table_checks(client, input, &facts.role, checks).await;
        let wanted = poll::Wanted {
            mark: *mark,
            order_by,
            role: &facts.role,
        };
        poll::poll_checks(client, input, &wanted, &tables, checks).await;
        return;
    }
    // The slot is looked up first: the headroom checks need to know whether it
    // already occupies a slot and a walsender.
    let slot = catalog::slot_info(client, &input.slot).await;
    let (slot_exists, slot_active) = match &slot {
        Ok(Some(info)) => (true, info.active),
        _ => (false, false),
    };
    checks.extend(server::server_checks(&facts, slot_exists, slot_active));
    checks.extend(server::role_checks(client, &facts.role).await);
    let tables = objects::table_checks(client, input, &facts.role, checks).await;
    objects::publication_checks(client, input, &facts, &tables, checks).await;
    checks.extend(messages::message_checks(client, input, &facts).await);
    let info = slot.as_ref().ok().and_then(Option::as_ref).cloned();
    let url = input.conninfo.redacted();
    objects::slot_checks(&input.slot, &facts.database, slot, checks);
    checks.extend(objects::tail_leftover_checks(client).await);
    checks.extend(failover::failover_checks(&failover::FailoverInput {
        version_num: facts.version_num,
        standby_slots: facts.synchronized_standby_slots.as_deref(),
        slot: &input.slot,
        url: &url,
        info: info.as_ref(),
        wanted: input.slot_failover,
    }));
    checks.extend(server::keep_size_check(&facts));
    checks.push(server::heartbeat_check(&facts));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> CheckReport {
        CheckReport {
            checks: vec![
                Check::pass("wal_level", "server", "logical"),
                Check::pass("publication_operations", "pgoutbox", "insert, update")
                    .suggest("ALTER PUBLICATION \"pgoutbox\" SET (publish = 'insert');"),
                Check::fail(
                    "role_replication",
                    "app",
                    "NOREPLICATION",
                    "ALTER ROLE \"app\" REPLICATION;",
                ),
            ],
        }
    }

    #[test]
    fn render_marks_and_fixes() {
        assert_eq!(
            report().render(),
            "✔ wal_level: server = logical\n\
             ✔ publication_operations: pgoutbox = insert, update — suggestion: ALTER PUBLICATION \"pgoutbox\" SET (publish = 'insert');\n\
             ✘ role_replication: app = NOREPLICATION — fix: ALTER ROLE \"app\" REPLICATION;\n"
        );
    }

    #[test]
    fn ok_and_json() {
        let mut r = report();
        assert!(!r.ok());
        assert_eq!(r.failures().count(), 1);
        let json = r.to_json();
        assert_eq!(json["ok"], false);
        assert_eq!(json["checks"][2]["name"], "role_replication");
        assert_eq!(json["checks"][2]["fix"], "ALTER ROLE \"app\" REPLICATION;");
        assert_eq!(json["checks"][0]["fix"], serde_json::Value::Null);
        r.checks.pop();
        assert!(r.ok());
        assert_eq!(r.to_json()["ok"], true);
        assert!(CheckReport::default().ok());
        assert_eq!(r.find("wal_level", "server").unwrap().observed, "logical");
        assert!(r.find("wal_level", "other").is_none());
    }
}
