//! The `pgoutbox` binary: parse arguments, set up logging, run a subcommand.
//! `anyhow` is used only here; errors print with their whole cause chain.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tokio_util::sync::CancellationToken;

use pgoutbox::cli::{Cli, Command, LogFormat, SetupArgs};
use pgoutbox::config::{validate_slot, SourceConfig, TailConfig};
use pgoutbox::pg::catalog::Ensured;
use pgoutbox::run::RunConfig;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr (stdout belongs to `tail`'s events); `RUST_LOG` filters.
fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Human => builder.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Tail(args) => {
            let cfg = TailConfig::from_args(&args)?;
            let shutdown = shutdown_on_signal();
            let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
            let printed = pgoutbox::tail::run(&cfg, &mut stdout, shutdown)
                .await
                .context("tail failed")?;
            tracing::info!(events = printed, "tail finished");
            Ok(())
        }
        Command::Setup(args) => setup(args).await,
        Command::Run(args) => {
            let cfg = RunConfig::from_args(&args)?;
            pgoutbox::run::run(&cfg, shutdown_on_signal())
                .await
                .context("relay stopped")?;
            Ok(())
        }
    }
}

async fn setup(args: SetupArgs) -> anyhow::Result<()> {
    let source = SourceConfig::from_args(&args.source)?;
    let slot = validate_slot(&args.slot)?;
    if args.print_sql {
        for statement in pgoutbox::setup::sql(&source.publication, &source.tables, &slot) {
            println!("{statement}");
        }
        return Ok(());
    }
    let outcome =
        pgoutbox::setup::run(&source.conninfo, &source.publication, &source.tables, &slot)
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

/// A token cancelled on SIGINT or SIGTERM.
fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
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
