//! hookline-store's integration tests, one binary for all of them: the conformance suite every
//! backend passes, and what only a shared PostgreSQL needs. The page cache's test has a binary
//! of its own (`tests/sqlite_page_cache.rs`): it installs a process-wide SQLite setting before
//! anything opens SQLite.

mod conformance;
mod ordering_model;
mod postgres;
