//! `pinctld`, the CPU-pinning daemon. Thin glue over [`pinctl::daemon`].
//!
//! `pinctld --config PATH` runs in the foreground until SIGTERM or SIGINT;
//! `pinctld --config PATH --check` validates the configuration and exits.
//! Exit codes: 0 success, 1 failure (the reason on stderr or in the journal),
//! 2 a wrong command line.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use pinctl::cli::DaemonCli;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Logs go to the journal when its socket exists, else to stderr. `RUST_LOG`
/// overrides the configured level.
fn init_logging(level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("pinctl={level},pinctld={level},warn")));
    let registry = tracing_subscriber::registry().with(filter);
    if Path::new("/run/systemd/journal/socket").exists()
        && let Ok(journald) = tracing_journald::layer()
    {
        registry.with(journald).init();
        return;
    }
    registry
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .init();
}

fn run(args: DaemonCli) -> Result<()> {
    let config = pinctl::config::load(&args.config)?;
    if args.check {
        println!(
            "{}: configuration is valid ({} rules)",
            args.config.display(),
            config.rules.len()
        );
        return Ok(());
    }
    init_logging(config.log_level.as_str());
    // One event loop on one thread; file I/O runs on the pool's own threads.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let result = runtime.block_on(async {
        let mut daemon = pinctl::daemon::Daemon::start(config).await?;
        // Test hook, for the watchdog tests only: SIGUSR2 wedges the loop.
        daemon.wedge_on_sigusr2(std::env::var_os("PINCTL_TEST_WEDGE").is_some_and(|v| v == "1"));
        daemon.run().await
    });
    // Never wait forever for an I/O thread stuck in the kernel.
    runtime.shutdown_timeout(Duration::from_secs(2));
    result
}

/// One malloc arena. glibc gives each thread that allocates an arena
/// of its own; the I/O threads allocate what the event loop frees, so each
/// arena keeps pages of its own, and the daemon's resident size grows with
/// every thread for no speed it needs.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    let args = DaemonCli::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "pinctld failed");
            eprintln!("pinctld: {e:#}");
            ExitCode::from(1)
        }
    }
}
