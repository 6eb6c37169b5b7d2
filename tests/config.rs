//! Configuration layering (flag > env > file > default), secret files, and the
//! canary: a password given through the environment or a file never appears in
//! any output of `config show`, `run`, `check`, `tail` or a failed login.

use crate::support;

use support::kafka::{Broker, Reader};
use support::{PgCluster, Pgoutbox, WAIT};

fn show(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut all = vec!["config", "show"];
    all.extend_from_slice(args);
    let mut p = Pgoutbox::spawn_with_env(&all, env);
    let status = p.wait_exit(WAIT);
    let out = p.stdout_so_far().join("\n");
    assert!(
        status.success(),
        "config show failed: {}\n{out}",
        p.stderr()
    );
    out
}

fn write_temp(name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("pgoutbox-cfg-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn flag_beats_env_beats_file_beats_default() {
    let file = write_temp(
        "prec.toml",
        "slot = \"from_file\"\nbrokers = \"file:9092\"\nmax_in_flight = 123\n",
    );
    let cfg = ["--config", file.as_str()];
    let out = show(&cfg, &[]);
    assert!(out.contains("slot = \"from_file\""), "{out}");
    assert!(out.contains("max_in_flight = 123"), "{out}");
    let out = show(&cfg, &[("PGOUTBOX_SLOT", "from_env")]);
    assert!(out.contains("slot = \"from_env\""), "{out}");
    let out = show(
        &["--config", file.as_str(), "--slot", "from_flag"],
        &[("PGOUTBOX_SLOT", "from_env")],
    );
    assert!(out.contains("slot = \"from_flag\""), "{out}");
    let out = show(&["--brokers", "b:1"], &[]);
    assert!(out.contains("slot = \"pgoutbox\""), "default: {out}");
    // The file can also be named by PGOUTBOX_CONFIG.
    let out = show(&[], &[("PGOUTBOX_CONFIG", file.as_str())]);
    assert!(out.contains("brokers = \"file:9092\""), "{out}");
}

#[test]
fn slot_failover_defaults_on_and_each_layer_turns_it_off() {
    let out = show(&["--brokers", "b:1"], &[]);
    assert!(out.contains("slot_failover = true"), "default: {out}");
    let file = write_temp(
        "failover.toml",
        "brokers = \"b:1\"\nslot_failover = false\n",
    );
    let out = show(&["--config", &file], &[]);
    assert!(out.contains("slot_failover = false"), "TOML boolean: {out}");
    let out = show(&["--brokers", "b:1"], &[("PGOUTBOX_SLOT_FAILOVER", "off")]);
    assert!(out.contains("slot_failover = false"), "env: {out}");
    let out = show(
        &["--config", &file, "--slot-failover"],
        &[("PGOUTBOX_SLOT_FAILOVER", "false")],
    );
    assert!(
        out.contains("slot_failover = true"),
        "a bare flag wins: {out}"
    );
}

#[test]
fn per_table_sections_and_unknown_keys() {
    let file = write_temp(
        "tables.toml",
        "brokers = \"b:1\"\n[tables.\"sales.order_outbox\"]\n\"table.field.event.key\" = \"order_id\"\ntopic_template = \"orders.${routedByValue}\"\n[tables.\"sales.payment_outbox\"]\nroute_by_field = \"kind\"\n",
    );
    let out = show(&["--config", &file], &[]);
    assert!(
        out.contains("table = [\"sales.order_outbox\", \"sales.payment_outbox\"]"),
        "{out}"
    );
    assert!(out.contains("key_column = \"order_id\""), "{out}");
    assert!(
        out.contains("topic_template = \"orders.${routedByValue}\""),
        "{out}"
    );
    assert!(out.contains("route_by_field = \"kind\""), "{out}");

    let bad = write_temp("bad.toml", "brokerz = \"x\"\n");
    let mut p = Pgoutbox::spawn(&["config", "show", "--config", &bad]);
    assert!(!p.wait_exit(WAIT).success());
    let err = p.stderr();
    assert!(
        err.contains("unknown key \"brokerz\"") && err.contains("brokers"),
        "{err}"
    );
}

/// Arguments and extra environment of one pgoutbox invocation.
type Invocation = (Vec<String>, Vec<(String, String)>);

#[test]
fn password_canary_never_printed() {
    const CANARY: &str = "Canary-Pw-7f3b9e";
    let cluster = PgCluster::shared();
    let db = cluster.fresh_db();
    let user = format!("canary_{}", db.name);
    db.psql(&format!(
        "CREATE ROLE {user} LOGIN REPLICATION PASSWORD 'right-password'; GRANT scram_users TO {user};"
    ));
    let url_with_pw = format!(
        "postgres://{user}:{CANARY}@127.0.0.1:{}/{}?sslmode=disable",
        cluster.port, db.name
    );
    let url_plain = format!(
        "postgres://{user}@127.0.0.1:{}/{}?sslmode=disable",
        cluster.port, db.name
    );
    let pw_file = write_temp("pw", &format!("{CANARY}\n"));
    let url_file = write_temp("url", &url_with_pw);
    let runs: Vec<Invocation> = vec![
        (
            vec![
                "config".into(),
                "show".into(),
                "--brokers".into(),
                "b:1".into(),
            ],
            vec![("PGOUTBOX_DATABASE_URL".into(), url_with_pw.clone())],
        ),
        (
            vec![
                "config".into(),
                "show".into(),
                "--brokers".into(),
                "b:1".into(),
                "--database-password-file".into(),
                pw_file.clone(),
            ],
            vec![("PGOUTBOX_DATABASE_URL".into(), url_plain.clone())],
        ),
        (
            vec!["tail".into()],
            vec![("PGOUTBOX_DATABASE_URL".into(), url_with_pw.clone())],
        ),
        (
            vec![
                "tail".into(),
                "--database-url-file".into(),
                url_file.clone(),
            ],
            vec![],
        ),
        (
            vec![
                "check".into(),
                "--database-password-file".into(),
                pw_file.clone(),
                "--database-url".into(),
                url_plain.clone(),
            ],
            vec![],
        ),
        (
            vec![
                "run".into(),
                "--brokers".into(),
                "127.0.0.1:1".into(),
                "--http-addr".into(),
                "off".into(),
            ],
            vec![("PGOUTBOX_DATABASE_URL".into(), url_with_pw.clone())],
        ),
    ];
    for (args, env) in runs {
        let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
        let env_ref: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut p = Pgoutbox::spawn_with_env(&args_ref, &env_ref);
        let status = p.wait_exit(WAIT);
        let out = p.stdout_so_far().join("\n");
        let err = p.stderr();
        assert!(
            !out.contains(CANARY) && !err.contains(CANARY),
            "{args:?} leaked the password:\n{out}\n{err}"
        );
        if args[0] != "config" {
            assert!(!status.success(), "{args:?} should fail the login");
            assert!(
                err.contains("password authentication failed")
                    || out.contains("password authentication failed"),
                "{args:?}: {err}\n{out}"
            );
        }
    }
}

#[test]
fn debezium_import_runs_and_routes_like_the_event_router() {
    let cluster = PgCluster::shared();
    let db = cluster.fresh_db();
    // A table with Debezium's default outbox column names.
    db.psql(
        "CREATE TABLE public.dbz_outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, \
         aggregateid text NOT NULL, type text NOT NULL, payload jsonb)",
    );
    let connector = format!(
        r#"{{"name": "legacy-outbox", "config": {{
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": "127.0.0.1", "database.port": "{port}",
            "database.user": "postgres", "database.password": "irrelevant",
            "database.dbname": "{db}", "database.sslmode": "disable",
            "topic.prefix": "legacy", "plugin.name": "pgoutput",
            "slot.name": "{db}_dbz", "publication.name": "{db}_pub",
            "table.include.list": "public.dbz_outbox",
            "transforms": "outbox",
            "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter"
        }}}}"#,
        port = cluster.port,
        db = db.name
    );
    let json = write_temp("connector.json", &connector);
    let mut import = Pgoutbox::spawn(&["config", "import-debezium", &json]);
    assert!(import.wait_exit(WAIT).success(), "{}", import.stderr());
    let broker = Broker::shared();
    let toml = import
        .stdout_so_far()
        .join("\n")
        .replace("CHANGE-ME:9092", &broker.addr());
    assert!(
        !toml.contains("irrelevant"),
        "no password in the TOML: {toml}"
    );
    let file = write_temp("imported.toml", &toml);
    let relay = Pgoutbox::spawn(&["run", "--config", &file, "--http-addr", "off"]);
    relay.wait_stderr("relaying outbox to kafka", WAIT);
    db.psql(
        "INSERT INTO public.dbz_outbox VALUES \
         ('6f1c3a52-8d0e-4a8f-9d61-0a4b9e2f7c11', 'legacyorder', 'order-7', 'OrderShipped', '{\"n\": 1}')",
    );
    // Debezium's EventRouter would write topic outbox.event.legacyorder, key aggregateid,
    // serialised by the Connect worker's default converters (JsonConverter with
    // schemas; aggregateid is NOT NULL, so optional is false), and header id only.
    let mut reader = Reader::new(&broker.addr(), &["outbox.event.legacyorder".to_owned()]);
    reader.read_until("the routed record", WAIT, |r| !r.is_empty());
    let rec = &reader.records[0];
    assert_eq!(
        rec.key.as_deref(),
        Some(&br#"{"schema":{"type":"string","optional":false},"payload":"order-7"}"#[..])
    );
    assert_eq!(rec.id(), "6f1c3a52-8d0e-4a8f-9d61-0a4b9e2f7c11");
    let names: Vec<&str> = rec.header_list.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["id"], "no placement: Debezium sends header id only");
    assert_eq!(
        rec.value.as_deref(),
        Some(
            &br#"{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{\"n\": 1}"}"#[..]
        )
    );
}

#[test]
fn readme_reference_documents_every_run_option() {
    use clap::CommandFactory;
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let cmd = pgoutbox::cli::Cli::command();
    let run = cmd.find_subcommand("run").expect("run subcommand");
    let mut missing = Vec::new();
    for arg in run.get_arguments().chain(cmd.get_arguments()) {
        let Some(env) = arg.get_env() else { continue };
        let env = env.to_string_lossy();
        let key = arg.get_long().unwrap_or_default().replace('-', "_");
        if !readme.contains(&format!("`{env}`")) || !readme.contains(&format!("`{key}`")) {
            missing.push(format!("{key} / {env}"));
        }
    }
    assert!(
        missing.is_empty(),
        "README configuration reference lacks: {missing:?}"
    );
}

/// A bad value in the file used to surface as clap's `invalid value 'ten' for
/// '--max-in-flight <RECORDS>'` (the file's values travel as environment
/// variables), invalid TOML lost its line, and a typo got no suggestion.
#[test]
fn config_file_errors_name_the_file_line_and_key() {
    let cases = [
        (
            "value.toml",
            "brokers = \"k:9092\"\nmax_in_flight = \"ten\"\n",
            ":2:1: key \"max_in_flight\": invalid value \"ten\": invalid digit found in string",
        ),
        (
            "syntax.toml",
            "brokers = \"k:9092\"\nslot = \n",
            ":2:8: config file is not valid TOML: ",
        ),
        (
            "typo.toml",
            "max_inflight = 10\n",
            ":1:1: unknown key \"max_inflight\" in the config file; did you mean \"max_in_flight\"?",
        ),
    ];
    for (name, text, says) in cases {
        let file = write_temp(name, text);
        let mut p = Pgoutbox::spawn(&["--config", &file, "config", "show"]);
        let status = p.wait_exit(WAIT);
        let err = p.stderr();
        assert_eq!(status.code(), Some(2), "{name}: {err}");
        assert!(
            err.starts_with(&format!("error: {file}{says}")),
            "{name}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
    }
}

/// `config show` is a display command: without brokers it used to exit 1 and show
/// nothing. It shows the configuration, marks `brokers` missing and warns.
#[test]
fn config_show_shows_a_configuration_that_lacks_brokers() {
    let mut p = Pgoutbox::spawn(&["config", "show", "--slot", "shown"]);
    let status = p.wait_exit(WAIT);
    let out = p.stdout_so_far().join("\n");
    let err = p.stderr();
    assert_eq!(status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains("slot = \"shown\""), "{out}");
    assert!(
        out.contains("# brokers = (missing: `run` needs --brokers host:port)"),
        "{out}"
    );
    assert!(
        err.contains("WARN") && err.contains("no Kafka brokers given; fix:"),
        "{err}"
    );
    // `run` still refuses, as a configuration error.
    let mut run = Pgoutbox::spawn(&["run", "--slot", "shown"]);
    assert_eq!(run.wait_exit(WAIT).code(), Some(2), "{}", run.stderr());
}

/// `config show` prints the delivery mode and, with exactly-once, its settings, as
/// keys a config file takes back.
#[test]
fn config_show_names_the_delivery_mode_and_reads_back() {
    let out = show(&["--brokers", "b:1"], &[]);
    assert!(out.contains("delivery = \"at-least-once\""), "{out}");
    assert!(!out.contains("watermark_topic"), "{out}");
    let out = show(
        &[
            "--brokers",
            "b:1",
            "--delivery",
            "exactly-once",
            "--transactional-id",
            "shop-relay",
        ],
        &[],
    );
    for line in [
        "delivery = \"exactly-once\"",
        "watermark_topic = \"pgoutbox.offsets\"",
        "transactional_id = \"shop-relay\"",
        "transaction_interval = \"100ms\"",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }
    let file = write_temp(
        "delivery.toml",
        "brokers = \"b:1\"\ndelivery = \"exactly-once\"\ntransaction_interval = \"250ms\"\n",
    );
    let again = show(&["--config", &file], &[]);
    assert!(again.contains("delivery = \"exactly-once\""), "{again}");
    assert!(
        again.contains("transaction_interval = \"250ms\""),
        "{again}"
    );
}
