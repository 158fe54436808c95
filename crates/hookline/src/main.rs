use std::process::ExitCode;

use clap::Parser;

/// Deliveries allocate and free small buffers on every worker thread (requests, rows, bodies),
/// which glibc's malloc serves far more slowly than mimalloc (docs/perf-journal.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Parsed first: `--help` and a mistyped flag end here, before any self-test; and the log's
    // format is a flag, or in the config file a flag names.
    let cli = hookline::cli::Cli::parse();
    hookline::logs::init(cli.log_format());
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
            let message = format!("cannot start the async runtime: {e}");
            hookline::logs::say(
                tracing::Level::ERROR,
                "hookline",
                &message,
                &format!("hookline: {message}"),
            );
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(hookline::cli::run(cli))
}
