//! hookline's integration tests, one binary (one link) for all of them. The tests that
//! read `/metrics` exactly have binaries of their own (`tests/metrics*.rs`): the metrics
//! recorder is process-wide, and each of them needs one that holds only what it did.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod api;
mod auth;
mod backup;
mod browser;
mod capacity;
mod cli_output;
mod client;
mod cluster;
mod compat;
mod config;
mod console;
mod crash;
mod delivery;
mod drill;
mod event_types;
mod example_receivers;
mod failover;
mod fairness;
mod host_cap;
mod http_limits;
mod isolation;
mod isolation_at_scale;
mod logs;
mod open_files;
mod openapi;
mod operational;
mod ordering;
mod packages;
mod portal;
mod receiver;
mod resends;
mod rollouts;
mod routes_fuzz;
mod sink;
mod tenants;
mod traces;
