//! `pinctl`, the operator's command line. Thin glue over [`pinctl::cli`].

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = pinctl::cli::Cli::parse();
    let mut stdout = std::io::stdout().lock();
    match pinctl::cli::run(cli, &mut stdout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pinctl: {e:#}");
            ExitCode::from(1)
        }
    }
}
