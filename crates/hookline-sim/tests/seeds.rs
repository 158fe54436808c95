//! The fixed seeds CI runs: SQLite on every one, PostgreSQL on a few (required under
//! `HOOKLINE_TEST_POSTGRES_REQUIRED=1`). A failure names its seed and step; replay it with
//! `HOOKLINE_SIM_SEED=<seed> cargo run -p hookline-sim`.

use hookline_sim::{run_blocking, Backend, Changes, SimConfig};

/// Seeds and steps sized for a debug build on two cores: 30 s for both tests alone, 50 s beside
/// another build.
const SQLITE_SEEDS: std::ops::RangeInclusive<u64> = 1..=24;
const POSTGRES_SEEDS: std::ops::RangeInclusive<u64> = 1..=4;
const STEPS: u32 = 200;

fn run_all(backend: Backend, seeds: std::ops::RangeInclusive<u64>) {
    for seed in seeds {
        let config = SimConfig {
            seed,
            steps: STEPS,
            backend,
            changes: Changes::BesideClaims,
        };
        if let Err(violation) = run_blocking(config) {
            panic!("{violation}");
        }
    }
}

#[test]
fn fixed_seeds_on_sqlite() {
    run_all(Backend::Sqlite, SQLITE_SEEDS);
}

#[test]
fn fixed_seeds_on_postgres() {
    if hookline_store::testing::postgres_url().is_none() {
        return;
    }
    run_all(Backend::Postgres, POSTGRES_SEEDS);
}
