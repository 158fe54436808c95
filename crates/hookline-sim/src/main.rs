//! `cargo run -p hookline-sim -- --seeds N`: a soak of N seeds; `HOOKLINE_SIM_SEED=S` (or
//! `--seed S`) replays one seed exactly. The first seed that breaks an invariant stops the run
//! and says which, and at which step; the exit code is then 1.

use std::time::Instant;

use clap::Parser;
use hookline_policy::DeadReason;
use hookline_sim::{run_blocking, Backend, Changes, SimConfig, Summary};

#[derive(Parser)]
#[command(about = "Deterministic simulation of hookline's delivery loop")]
struct Args {
    /// Run this many seeds, from `--first` on.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed of the soak.
    #[arg(long, default_value_t = 1)]
    first: u64,
    /// Replay this one seed (and nothing else).
    #[arg(long, env = "HOOKLINE_SIM_SEED")]
    seed: Option<u64>,
    /// Scheduled steps per seed, before the drain.
    #[arg(long, default_value_t = 300)]
    steps: u32,
    /// Run on PostgreSQL (`HOOKLINE_TEST_POSTGRES`, a schema per seed) instead of SQLite.
    #[arg(long)]
    postgres: bool,
    /// On PostgreSQL, run each control change before the claim rather than beside it: an
    /// exact replay, which cannot show what only a race between them shows.
    #[arg(long)]
    in_turn: bool,
}

fn main() {
    let args = Args::parse();
    let backend = if args.postgres {
        Backend::Postgres
    } else {
        Backend::Sqlite
    };
    let changes = if args.in_turn {
        Changes::InTurn
    } else {
        Changes::BesideClaims
    };
    let seeds = match args.seed {
        Some(seed) => seed..seed.saturating_add(1),
        None => args.first..args.first.saturating_add(args.seeds),
    };
    let started = Instant::now();
    let mut total = Summary::default();
    let mut ran = 0u64;
    for seed in seeds {
        let config = SimConfig {
            seed,
            steps: args.steps,
            backend,
            changes,
        };
        match run_blocking(config) {
            Ok(summary) => {
                total += summary;
                ran += 1;
                if args.seed.is_some() {
                    println!("seed {seed}: {summary:?}");
                }
            }
            Err(violation) => {
                eprintln!("{violation}");
                std::process::exit(1);
            }
        }
        if ran.is_multiple_of(100) {
            eprintln!("{ran} seeds passed ({:.0?})", started.elapsed());
        }
    }
    println!(
        "{ran} seeds passed in {:.1?} on {backend:?}: {total:?}",
        started.elapsed()
    );
    let dead: Vec<String> = DeadReason::ALL
        .iter()
        .zip(total.dead_by_reason)
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect();
    println!("dead by reason: {}", dead.join(", "));
}
