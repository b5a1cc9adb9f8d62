//! `pinctld`, the CPU-pinning daemon. Thin glue over [`pinctl::daemon`].
//!
//! `pinctld --config PATH` runs in the foreground until SIGTERM or SIGINT;
//! `pinctld --config PATH --check` validates the configuration and exits.
//! SIGHUP reads the configuration again (see [`pinctl::config::Config::reload`]).
//! Exit codes: 0 success, 1 failure (the reason on stderr or in the journal),
//! 2 a wrong command line.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use pinctl::cli::DaemonCli;
use pinctl::config::LogLevel;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, reload};

/// The filter of `level`: our crates at that level, everything else at warn.
fn level_filter(level: LogLevel) -> EnvFilter {
    let level = level.as_str();
    EnvFilter::new(format!("pinctl={level},pinctld={level},warn"))
}

/// Logs go to the journal when its socket exists, else to stderr. `RUST_LOG`
/// overrides the configured level, then and at every reload. Returns what
/// sets a reloaded level.
fn init_logging(level: LogLevel) -> impl Fn(LogLevel) + 'static {
    let from_env = EnvFilter::try_from_default_env().ok();
    let overridden = from_env.is_some();
    let (filter, handle) = reload::Layer::new(from_env.unwrap_or_else(|| level_filter(level)));
    let registry = tracing_subscriber::registry().with(filter);
    if Path::new("/run/systemd/journal/socket").exists()
        && let Ok(journald) = tracing_journald::layer()
    {
        registry.with(journald).init();
    } else {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal()),
            )
            .init();
    }
    move |level| {
        if overridden {
            tracing::warn!(
                level = level.as_str(),
                "log_level not applied: RUST_LOG overrides it"
            );
        } else if let Err(e) = handle.reload(level_filter(level)) {
            tracing::warn!(error = %e, "cannot change the log level");
        } else {
            tracing::info!(level = level.as_str(), "log level changed");
        }
    }
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
    let set_log_level = init_logging(config.log_level);
    // Before the daemon starts: the socket's connection cap is derived from
    // the limit in force.
    match pinctl::server::raise_fd_limit() {
        Ok(nofile) => tracing::debug!(nofile, "open files limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open files limit"),
    }
    // One event loop on one thread; file I/O runs on the pool's own threads.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let result = runtime.block_on(async {
        let mut daemon = pinctl::daemon::Daemon::start(config).await?;
        daemon.reload_from(args.config.clone());
        daemon.on_log_level(set_log_level);
        // Test hook, for the watchdog tests only: SIGUSR2 wedges the loop.
        daemon.wedge_on_sigusr2(std::env::var_os("PINCTL_TEST_WEDGE").is_some_and(|v| v == "1"));
        // Test hook, for the soak's mutation check only (tests/soak): a
        // release forgets another pinned workload. Debug builds only.
        #[cfg(debug_assertions)]
        daemon.forget_at_release(
            std::env::var_os("PINCTL_TEST_FORGET_RELEASE").is_some_and(|v| v == "1"),
        );
        // Test hook: how soon a write over a scope's pin is told to systemd.
        if let Some(ms) = std::env::var("PINCTL_TEST_SYSTEMD_SETTLE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            daemon.systemd_settle(Duration::from_millis(ms));
        }
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
