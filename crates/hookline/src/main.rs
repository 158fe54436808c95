use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// Deliveries allocate and free small buffers on every worker thread (requests, rows, bodies),
/// which glibc's malloc serves far more slowly than mimalloc (docs/perf-journal.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Colour codes only where a person reads them: stderr on a terminal, unless `NO_COLOR` is set
/// to anything but nothing (<https://no-color.org>). A file, a pipe or journald gets plain
/// text, which grep and log shippers read as written.
fn colour_logs() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(colour_logs())
        .init();
    // Parsed first: `--help` and a mistyped flag end here, before any self-test.
    let cli = hookline::cli::Cli::parse();
    // SAFETY: this is the process's only thread, and nothing has touched SQLite yet: the
    // runtime's threads start below.
    match unsafe { hookline_store::install_sqlite_page_cache() } {
        Ok(()) => tracing::debug!("SQLite's page cache wrapper passed its self-test"),
        Err(e) => tracing::warn!(error = %e, "SQLite's page cache stays as it is"),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("hookline: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(hookline::cli::run(cli))
}
