//! hookline: webhook fan-out delivery. Publish an event once; hookline delivers it to every
//! subscribed endpoint at least once, with bounded retries, isolated failures and an audited
//! dead-letter queue. See `docs/ARCHITECTURE.md` for the map.

pub mod api;
pub mod app;
pub mod capacity;
pub mod cli;
pub mod clock;
pub mod config;
pub mod destination;
pub mod dispatcher;
pub mod health;
pub mod hosts;
pub mod open_files;
pub mod policies;
pub mod rollouts;
pub mod schema;
pub mod sender;
pub mod server;
pub mod signer;
pub mod slots;
pub mod slowness;
pub mod subscriber_series;
pub mod telemetry;
pub mod tokens;
