//! The `pgoutbox` binary: parse arguments, set up logging, run a subcommand.
//! `anyhow` is used only here; an error prints once, with its whole cause chain
//! ([`pgoutbox::report`]), and exits with its status ([`pgoutbox::exit`]). Output
//! goes through [`stdout`] so that a reader closing the pipe (`| head`) ends the
//! command quietly instead of panicking.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser};
use tokio_util::sync::CancellationToken;

use pgoutbox::cli::{
    CheckArgs, CleanupArgs, Cli, ColorWhen, Command, ConfigCommand, LogFormat, ManArgs,
    PollMarkArg, SetupArgs, SourceKind, StatusArgs, TeardownArgs,
};
use pgoutbox::config::file::TableOverrides;
use pgoutbox::config::{self, validate_slot, RoutingConfig};
use pgoutbox::exit::{Coded, Status};
use pgoutbox::failure;
use pgoutbox::ops::check::{self as checks, CheckInput, CheckMode, TemplateInput};
use pgoutbox::ops::cleanup::{CleanupInput, CleanupMode, CleanupTable};
use pgoutbox::pg::source::catalog::Ensured;
use pgoutbox::report::Report;

fn main() -> ExitCode {
    // The config file's values become PGOUTBOX_* variables where unset, before clap
    // reads the environment: flag > env > file > default.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let overrides = match pgoutbox::config::file::apply(&args) {
        Ok(o) => o,
        Err(err) => {
            // The log format may still come from the flag or the environment.
            let (format, color) = Cli::try_parse()
                .map_or((LogFormat::Human, ColorWhen::Auto), |cli| {
                    (cli.log_format, cli.color)
                });
            init_logging(format, color);
            return fail(format, &err.into());
        }
    };
    // A usage error exits 2 here (clap's own code, the same as Status::Usage).
    let cli = Cli::parse();
    let format = cli.log_format;
    init_logging(format, cli.color);
    // One thread for all async work: the relay's tasks (replication stream, the
    // relay loop, HTTP) hand messages to each other constantly, and on one thread a
    // hand-off is a queue push instead of a cross-thread wake-up (futex + context
    // switch). librdkafka runs its own threads; blocking calls use spawn_blocking.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            return fail(
                format,
                &anyhow::Error::new(err).context("cannot start the async runtime"),
            )
        }
    };
    match runtime.block_on(run(cli, overrides)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(format, &err),
    }
}

/// Report `err` once, in the log format, and map it to its exit status
/// ([`pgoutbox::exit`]). A closed stdout is not reported: its reader left on purpose.
/// A JSON log filtered to silence (`RUST_LOG=off`) still gets the plain line: the
/// reason a process ended is never dropped.
fn fail(format: LogFormat, err: &anyhow::Error) -> ExitCode {
    let error: &(dyn std::error::Error + 'static) = err.as_ref();
    let status = failure::status_of(error);
    if status == Status::BrokenPipe {
        return ExitCode::from(status.code());
    }
    if format == LogFormat::Json && tracing::enabled!(tracing::Level::ERROR) {
        tracing::error!(error = %Report(error), exit_code = status.code(), "exiting");
    } else {
        eprintln!("error: {}", Report(error));
    }
    ExitCode::from(status.code())
}

/// Logs go to stderr (stdout belongs to `tail`'s events); `RUST_LOG` filters;
/// colors follow `--color` ([`config::log_colors`]).
fn init_logging(format: LogFormat, color: ColorWhen) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Human => {
            let ansi = config::log_colors(color, std::io::stderr().is_terminal(), &|name| {
                std::env::var(name).ok()
            });
            builder.with_ansi(ansi).init()
        }
    }
}

/// Standard output for a command's results. Writes are checked: a reader that
/// closed the pipe gives [`std::io::ErrorKind::BrokenPipe`], never a panic.
fn stdout() -> std::io::StdoutLock<'static> {
    std::io::stdout().lock()
}

/// Write `text` to stdout and flush it (a watch loop's reader sees each refresh).
fn print(text: &str) -> anyhow::Result<()> {
    let mut out = stdout();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")
}

async fn run(cli: Cli, overrides: TableOverrides) -> anyhow::Result<()> {
    match cli.command {
        Command::Tail(args) => {
            let cfg = config::tail(&args, &overrides)?;
            let shutdown = shutdown_on_signal();
            let mut stdout = std::io::BufWriter::new(stdout());
            let printed = pgoutbox::tail::run(&cfg, &mut stdout, shutdown)
                .await
                .context("tail failed")?;
            tracing::info!(events = printed, "tail finished");
            Ok(())
        }
        Command::Setup(args) => setup(args).await,
        Command::Check(args) => check(args, &overrides).await,
        Command::Status(args) => status(args).await,
        Command::Teardown(args) => teardown(args).await,
        Command::Cleanup(args) => cleanup(args, &overrides).await,
        Command::Config(ConfigCommand::Show(args)) => {
            let (cfg, missing) = config::show(&args, &overrides)?;
            print(&config::show_toml(&cfg))?;
            for err in missing {
                // A display command: say what `run` would refuse, without failing.
                tracing::warn!("{err}");
            }
            Ok(())
        }
        Command::Config(ConfigCommand::ImportDebezium { file }) => {
            let json = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let imported = pgoutbox::config::debezium::import(&json)?;
            eprint!(
                "{}",
                pgoutbox::config::debezium::render_notes(&imported.notes)
            );
            print(&imported.toml)
        }
        Command::Completions { shell } => {
            // Rendered first: clap_complete panics when its writer fails.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "pgoutbox", &mut script);
            print(&String::from_utf8_lossy(&script))
        }
        Command::Man(args) => man(args),
        Command::Replay(args) => replay(&args, &overrides).await,
        Command::Run(args) => {
            let cfg = config::run(&args, &overrides)?;
            pgoutbox::run::run(&cfg, shutdown_on_signal())
                .await
                .context("relay stopped")?;
            Ok(())
        }
    }
}

/// `pgoutbox replay`: with --dry-run the records go to stdout and the summary to
/// stderr (stdout stays one JSON object per line); otherwise the summary to stdout.
async fn replay(
    args: &pgoutbox::cli::ReplayArgs,
    overrides: &TableOverrides,
) -> anyhow::Result<()> {
    let cfg = config::replay(args, overrides)?;
    let shutdown = shutdown_on_signal();
    let mut records = std::io::BufWriter::new(stdout());
    let mut summary: Vec<u8> = Vec::new();
    let result = pgoutbox::replay::run(&cfg, &mut records, &mut summary, shutdown).await;
    records.flush().context("writing to stdout")?;
    drop(records);
    if args.dry_run {
        eprint!("{}", String::from_utf8_lossy(&summary));
    } else {
        print(&String::from_utf8_lossy(&summary))?;
    }
    result.context("replay failed")?;
    Ok(())
}

/// `pgoutbox man`: one page to stdout, or every page into a directory.
fn man(args: ManArgs) -> anyhow::Result<()> {
    // No `help` subcommand in the pages: it would list a pgoutbox-help(1).
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    if let Some(dir) = args.out_dir {
        std::fs::create_dir_all(&dir)
            .and_then(|()| clap_mangen::generate_to(cmd, &dir))
            .with_context(|| format!("cannot write man pages into {}", dir.display()))?;
        return Ok(());
    }
    let mut page = &cmd;
    for name in &args.command {
        page = page.find_subcommand(name).ok_or_else(|| {
            Coded::new(
                Status::Usage,
                format!("no man page for {name:?}: `pgoutbox --help` lists the commands"),
            )
        })?;
    }
    let mut roff = Vec::new();
    clap_mangen::Man::new(page.clone()).render(&mut roff)?;
    print(&String::from_utf8_lossy(&roff))
}

async fn setup(args: SetupArgs) -> anyhow::Result<()> {
    if args.source_kind.kind == SourceKind::Poll {
        return setup_poll(args).await;
    }
    let source = config::source(&args.source)?;
    let slot = validate_slot(&args.slot.name)?;
    if args.print_sql {
        let mut text = String::from("-- publication first, then the slot (pgoutput reads the publication through the slot's snapshot)\n");
        for statement in pgoutbox::setup::sql(
            &source.publication,
            &source.tables,
            &slot,
            args.slot_failover.slot_failover,
        ) {
            text.push_str(&format!("{statement}\n"));
        }
        if args.republish_trigger {
            text.push_str("\n-- the republish trigger (superuser): a re-created outbox table is published in the transaction that creates it\n");
            for statement in
                pgoutbox::pg::source::republish::install_sql(&source.publication, &source.tables)
            {
                text.push_str(&format!("{statement}\n"));
            }
        }
        text.push_str("\n-- least-privilege role for the relay\n");
        for statement in pgoutbox::pg::source::catalog::grants_sql(&args.role, &source.tables) {
            text.push_str(&format!("{statement}\n"));
        }
        return print(&text);
    }
    let outcome = pgoutbox::setup::run(
        &source.conninfo,
        &source.publication,
        &source.tables,
        &slot,
        args.slot_failover.slot_failover,
        source.messages_only,
    )
    .await
    .context("setup failed")?;
    if args.republish_trigger {
        pgoutbox::setup::install_republish_trigger(
            &source.conninfo,
            &source.publication,
            &source.tables,
        )
        .await
        .context("setup failed")?;
        print(&format!(
            "republish trigger {:?}: installed\n",
            pgoutbox::pg::source::republish::trigger_name(&source.publication)
        ))?;
    }
    let word = |e: Ensured| match e {
        Ensured::Created => "created",
        Ensured::Existed => "already present",
    };
    print(&format!(
        "publication {:?}: {}\nreplication slot {slot:?}: {}\n",
        source.publication,
        word(outcome.publication),
        word(outcome.slot)
    ))
}

/// `setup --source poll`: poll mode's column, index and trigger, no publication or slot.
async fn setup_poll(args: SetupArgs) -> anyhow::Result<()> {
    let source = config::source(&args.source)?;
    let order_by = &args.poll_order.order_by;
    if args.print_sql {
        let mut text = String::from("-- poll mode (pgoutbox run --source poll): published_at, the ordering column, the partial index, the NOTIFY trigger; idempotent\n");
        for statement in pgoutbox::setup::poll_sql(&source.tables, order_by) {
            text.push_str(&format!("{statement}\n"));
        }
        text.push_str("\n-- the relay's role (FOR UPDATE and the mark need UPDATE; with --poll-mark delete also grant DELETE)\n");
        for table in &source.tables {
            text.push_str(&format!(
                "GRANT SELECT, UPDATE ON {} TO {};\n",
                table.quoted(),
                pgoutbox::pg::names::quote_ident(&args.role)
            ));
        }
        return print(&text);
    }
    let outcomes = pgoutbox::setup::run_poll(&source.conninfo, &source.tables, order_by)
        .await
        .context("setup --source poll failed")?;
    let mut text = String::new();
    for o in outcomes {
        let added = match o.added.is_empty() {
            true => "columns already present".to_owned(),
            false => format!("added column(s) {}", o.added.join(", ")),
        };
        text.push_str(&format!(
            "outbox table {}: ready for --source poll ({added}; partial index on unpublished rows and NOTIFY trigger ensured; ordered by {order_by:?})\n",
            o.table
        ));
    }
    print(&text)
}

async fn check(args: CheckArgs, overrides: &TableOverrides) -> anyhow::Result<()> {
    let source = config::source(&args.source)?;
    let routing = RoutingConfig::from_args(&args.routing, overrides)?;
    let mut columns: Vec<String> = Vec::new();
    for m in routing.mappings(&source.tables)? {
        let trace = m.trace_context.map(|t| t.column);
        for c in [m.id, m.route_by, m.key, m.payload]
            .into_iter()
            .chain(trace)
        {
            if !columns.contains(&c) {
                columns.push(c);
            }
        }
    }
    let templates = routing
        .templates(&source.tables)
        .into_iter()
        .map(|t| TemplateInput {
            table: t.table,
            template: t.template,
            origin: t.origin,
        })
        .collect();
    let mode = match args.kind.kind {
        SourceKind::Logical => CheckMode::Logical,
        SourceKind::Poll => CheckMode::Poll {
            mark: match args.poll_mark.mark {
                PollMarkArg::Published => checks::PollMark::Published,
                PollMarkArg::Delete => checks::PollMark::Delete,
            },
            order_by: args.poll_order.order_by.clone(),
        },
    };
    let input = CheckInput {
        mode,
        conninfo: source.conninfo.clone(),
        publication: source.publication.clone(),
        tables: source.tables.clone(),
        slot: validate_slot(&args.slot.name)?,
        slot_failover: args.slot_failover.slot_failover,
        columns,
        brokers: args.brokers.clone(),
        kafka_options: config::kafka_options(&args.kafka)?,
        templates,
        message_prefixes: source.message_prefixes.clone(),
        messages_only: source.messages_only,
        delivery: config::delivery(&args.delivery, args.kind.kind == SourceKind::Poll)?,
    };
    let report = pgoutbox::ops::check::check(&input).await;
    if args.json {
        print(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report.to_json())?
        ))?;
    } else {
        print(&report.render())?;
    }
    if !report.ok() {
        let failed = report.failures().count();
        return Err(Coded::new(Status::CheckFailed, format!("{failed} check(s) failed")).into());
    }
    Ok(())
}

async fn cleanup(args: CleanupArgs, overrides: &TableOverrides) -> anyhow::Result<()> {
    let source = config::source(&args.source)?;
    if args.older_than.is_zero() && !args.force {
        let message = "--older-than 0 would delete rows the moment the relay is done with them, \
                       leaving nothing to inspect or replay from the table; pass a positive \
                       duration such as 7d, or --force if that is what you want";
        return Err(Coded::new(Status::Usage, message).into());
    }
    let routing = RoutingConfig::from_args(&args.routing, overrides)?;
    let tables = routing
        .mappings(&source.tables)?
        .into_iter()
        .zip(&source.tables)
        .map(|(m, table)| CleanupTable {
            table: table.clone(),
            timestamp_column: m.timestamp,
        })
        .collect();
    let mode = match args.kind.kind {
        SourceKind::Poll => CleanupMode::Poll,
        SourceKind::Logical if args.not_last_copy => CleanupMode::Logical { slot: None },
        SourceKind::Logical => CleanupMode::Logical {
            slot: Some(validate_slot(&args.slot.name)?),
        },
    };
    let input = CleanupInput {
        conninfo: source.conninfo,
        tables,
        mode,
        older_than: args.older_than,
        batch_size: args.batch_size,
        dry_run: args.dry_run,
    };
    let summary = pgoutbox::ops::cleanup::cleanup(&input)
        .await
        .context("cleanup stopped")?;
    for t in &summary.tables {
        tracing::info!(
            table = %t.table,
            rows = t.rows,
            batches = t.batches,
            elapsed_ms = t.elapsed.as_millis() as u64,
            longest_batch_ms = t.longest_batch.as_millis() as u64,
            dry_run = summary.dry_run,
            "cleanup finished"
        );
    }
    print(&summary.render())
}

async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let source = config::source(&args.source)?;
    let slot = validate_slot(&args.slot.name)?;
    loop {
        let status = pgoutbox::ops::status::status(&source.conninfo, &slot).await?;
        // The relay's window and memory, from its /metrics (`--http-addr`).
        let addr = (args.http_addr != "off").then_some(args.http_addr.as_str());
        let relay = match addr {
            Some(addr) => Some((addr, pgoutbox::ops::relay::read(addr).await)),
            None => None,
        };
        if args.json {
            let mut json = status.to_json();
            json["source"] = pgoutbox::ops::status::source_json(&source);
            if let Some((addr, relay)) = &relay {
                json["relay"] = relay.to_json(addr);
            }
            print(&format!("{}\n", serde_json::to_string(&json)?))?;
        } else {
            print(&status.render())?;
            print(&pgoutbox::ops::status::source_line(&source))?;
            if let Some((addr, relay)) = &relay {
                print(&relay.render(addr))?;
            }
        }
        let Some(every) = args.watch else {
            return status_verdict(&status);
        };
        tokio::time::sleep(std::time::Duration::from_secs(every.max(1))).await;
        if !args.json {
            print("\n")?;
        }
    }
}

/// A one-shot `status` fails (exit 3) when the slot cannot be relayed from.
fn status_verdict(status: &pgoutbox::ops::status::SlotStatus) -> anyhow::Result<()> {
    let problem = if !status.exists {
        "does not exist; fix: `pgoutbox setup` (or `run`) creates it"
    } else if status.wal_status.as_deref() == Some("lost") {
        "is lost (wal_status = lost); fix: see `pgoutbox run`'s message, then re-create it"
    } else {
        return Ok(());
    };
    let message = format!("replication slot {:?} {problem}", status.slot);
    Err(Coded::new(Status::CheckFailed, message).into())
}

async fn teardown(args: TeardownArgs) -> anyhow::Result<()> {
    let source = config::source(&args.source)?;
    let slot = validate_slot(&args.slot.name)?;
    if !args.yes {
        let message = format!(
            "teardown drops replication slot {slot:?}, publication {:?} and run's state file of the slot; events not yet relayed can then only be recovered from the outbox table. Re-run with --yes",
            source.publication
        );
        return Err(Coded::new(Status::Usage, message).into());
    }
    let state_dir = pgoutbox::state::state_dir(args.state.state_dir.as_deref())?;
    let outcome = pgoutbox::ops::teardown::teardown(
        &source.conninfo,
        &slot,
        &source.publication,
        state_dir.as_deref(),
    )
    .await?;
    print(&outcome.render())
}

/// A token cancelled on SIGINT or SIGTERM.
fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    pgoutbox::task::spawn("signals", async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {}
            _ = term => {}
        }
        tracing::info!("shutdown requested");
        cancel.cancel();
    });
    token
}
