//! `pinctl`, the operator's command line. Thin glue over [`pinctl::cli`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Arg, ArgMatches, Command, CommandFactory, FromArgMatches};
use pinctl::cli::style::visible;
use pinctl::cli::{Cli, assets};

/// The hidden subcommand `packaging/build` uses to write the man pages and
/// completions the packages install. It is added here, not to [`Cli`], so the
/// pages and completions generated from `Cli` never mention it.
const GENERATE_ASSETS: &str = "generate-assets";

fn command() -> Command {
    Cli::command().subcommand(
        Command::new(GENERATE_ASSETS)
            .hide(true)
            .about("Write the man pages and shell completions below DIR")
            .arg(
                Arg::new("out")
                    .long("out")
                    .value_name("DIR")
                    .required(true)
                    .value_parser(clap::value_parser!(PathBuf)),
            ),
    )
}

fn run(matches: &ArgMatches, stdout: &mut dyn std::io::Write) -> anyhow::Result<()> {
    if let Some((GENERATE_ASSETS, sub)) = matches.subcommand() {
        let out = sub.get_one::<PathBuf>("out").expect("--out is required");
        for path in assets::generate(out, &assets::build_date())? {
            writeln!(stdout, "{}", path.display())?;
        }
        return Ok(());
    }
    let cli = Cli::from_arg_matches(matches).unwrap_or_else(|e| e.exit());
    pinctl::cli::run(cli, stdout)
}

/// Whether `e` is a write to standard output whose reader went away
/// (`pinctl events | head`): the output was simply no longer wanted. Only the
/// top of the chain counts: a broken pipe inside a request to the daemon is a
/// real failure.
fn is_closed_stdout(e: &anyhow::Error) -> bool {
    let broken = |kind: Option<std::io::ErrorKind>| kind == Some(std::io::ErrorKind::BrokenPipe);
    broken(e.downcast_ref::<std::io::Error>().map(std::io::Error::kind))
        || broken(
            e.downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind),
        )
}

fn main() -> ExitCode {
    let matches = command().get_matches();
    let mut stdout = std::io::stdout().lock();
    match run(&matches, &mut stdout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_closed_stdout(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // The chain may quote a daemon's answer, a path or a key.
            eprintln!("pinctl: {}", visible(&format!("{e:#}")));
            ExitCode::from(pinctl::cli::exit_code(&e))
        }
    }
}
