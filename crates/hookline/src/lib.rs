//! hookline: webhook fan-out delivery. Publish an event once; hookline delivers it to every
//! subscribed endpoint at least once, with bounded retries, isolated failures and an audited
//! dead-letter queue. See `docs/ARCHITECTURE.md` for the map.

pub mod api;
pub mod app;
pub mod capacity;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod logs;
pub mod open_files;
pub mod operational;
pub mod policies;
pub mod process_metrics;
pub mod rollouts;
pub use hookline_api::schema;
pub mod server;
pub mod telemetry;
pub mod tokens;
pub mod traces;
