//! hookline's delivery engine: the dispatcher's loop (claim -> send -> decide -> commit) and
//! what it runs on: delivery slots and the slow lane, each subscriber's usual answer time, the
//! signer, the destination guard, the policies in force, the meter the capacity model reads,
//! the metrics an attempt records and the spans of claims and attempts (`traces`). The `hookline` crate is the API, the CLI and the wiring
//! around it; nothing here serves HTTP or reads the configuration file.

pub mod clock;
pub mod config;
pub mod destination;
pub mod dispatcher;
pub mod health;
pub mod hosts;
pub mod meter;
pub mod policy;
pub mod sender;
pub mod signer;
pub mod slots;
pub mod slowness;
pub mod subscriber_series;
pub mod telemetry;
pub mod traces;
