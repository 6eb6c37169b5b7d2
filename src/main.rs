//! The `pgoutbox` binary: parse arguments, set up logging, run a subcommand.
//! `anyhow` is used only here; errors print with their whole cause chain.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tokio_util::sync::CancellationToken;

use clap::CommandFactory;
use pgoutbox::cli::{
    CheckArgs, Cli, ColorWhen, Command, ConfigCommand, LogFormat, SetupArgs, StatusArgs,
    TeardownArgs,
};
use pgoutbox::config::file::TableOverrides;
use pgoutbox::config::{self, validate_slot, RoutingConfig};
use pgoutbox::ops::check::{CheckInput, TemplateInput};
use pgoutbox::pg::catalog::Ensured;

fn main() -> ExitCode {
    // The config file's values become PGOUTBOX_* variables where unset, before clap
    // reads the environment: flag > env > file > default.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let overrides = match pgoutbox::config::file::apply(&args) {
        Ok(o) => o,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse();
    init_logging(cli.log_format, cli.color);
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
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli, overrides)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
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

async fn run(cli: Cli, overrides: TableOverrides) -> anyhow::Result<()> {
    match cli.command {
        Command::Tail(args) => {
            let cfg = config::tail(&args, &overrides)?;
            let shutdown = shutdown_on_signal();
            let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
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
        Command::Config(ConfigCommand::Show(args)) => {
            let cfg = config::run(&args, &overrides)?;
            print!("{}", config::show_toml(&cfg));
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
            print!("{}", imported.toml);
            Ok(())
        }
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "pgoutbox", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => {
            clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout())?;
            Ok(())
        }
        Command::Run(args) => {
            let cfg = config::run(&args, &overrides)?;
            pgoutbox::run::run(&cfg, shutdown_on_signal())
                .await
                .context("relay stopped")?;
            Ok(())
        }
    }
}

async fn setup(args: SetupArgs) -> anyhow::Result<()> {
    let source = config::source(&args.source)?;
    let slot = validate_slot(&args.slot.name)?;
    if args.print_sql {
        println!("-- publication first, then the slot (pgoutput reads the publication through the slot's snapshot)");
        for statement in pgoutbox::setup::sql(
            &source.publication,
            &source.tables,
            &slot,
            args.slot_failover.slot_failover,
        ) {
            println!("{statement}");
        }
        println!("\n-- least-privilege role for the relay");
        for statement in pgoutbox::pg::catalog::grants_sql(&args.role, &source.tables) {
            println!("{statement}");
        }
        return Ok(());
    }
    let outcome = pgoutbox::setup::run(
        &source.conninfo,
        &source.publication,
        &source.tables,
        &slot,
        args.slot_failover.slot_failover,
    )
    .await
    .context("setup failed")?;
    let word = |e: Ensured| match e {
        Ensured::Created => "created",
        Ensured::Existed => "already present",
    };
    println!(
        "publication {:?}: {}",
        source.publication,
        word(outcome.publication)
    );
    println!("replication slot {slot:?}: {}", word(outcome.slot));
    Ok(())
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
    let input = CheckInput {
        conninfo: source.conninfo.clone(),
        publication: source.publication.clone(),
        tables: source.tables.clone(),
        slot: validate_slot(&args.slot.name)?,
        slot_failover: args.slot_failover.slot_failover,
        columns,
        brokers: args.brokers.clone(),
        kafka_options: config::kafka_options(&args.kafka)?,
        templates,
    };
    let report = pgoutbox::ops::check::check(&input).await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.render());
    }
    anyhow::ensure!(report.ok(), "{} check(s) failed", report.failures().count());
    Ok(())
}

async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let source = config::source(&args.source)?;
    let slot = validate_slot(&args.slot.name)?;
    loop {
        let status = pgoutbox::ops::status::status(&source.conninfo, &slot).await?;
        if args.json {
            println!("{}", serde_json::to_string(&status.to_json())?);
        } else {
            print!("{}", status.render());
        }
        let Some(every) = args.watch else {
            return Ok(());
        };
        tokio::time::sleep(std::time::Duration::from_secs(every.max(1))).await;
        if !args.json {
            println!();
        }
    }
}

async fn teardown(args: TeardownArgs) -> anyhow::Result<()> {
    let source = config::source(&args.source)?;
    let slot = validate_slot(&args.slot.name)?;
    anyhow::ensure!(
        args.yes,
        "teardown drops replication slot {slot:?}, publication {:?} and run's state file of the slot; events not yet relayed can then only be recovered from the outbox table. Re-run with --yes",
        source.publication
    );
    let state_dir = pgoutbox::state::state_dir(args.state.state_dir.as_deref())?;
    let outcome = pgoutbox::ops::teardown::teardown(
        &source.conninfo,
        &slot,
        &source.publication,
        state_dir.as_deref(),
    )
    .await?;
    print!("{}", outcome.render());
    Ok(())
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
