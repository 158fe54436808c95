use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// Deliveries allocate and free small buffers on every worker thread (requests, rows, bodies);
/// glibc's malloc spent ~15% of a busy process's time on that, mimalloc much less (see
/// docs/SCALING.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    // SAFETY: nothing has touched SQLite yet, and no other thread runs hookline's code before
    // this returns.
    unsafe { hookline_store::install_sqlite_page_cache() };
    hookline::cli::run(hookline::cli::Cli::parse()).await
}
