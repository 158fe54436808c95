#![doc = include_str!("../README.md")]

pub mod answers;
pub mod error;
pub mod queries;
pub mod requests;
#[cfg(feature = "openapi")]
pub mod schema;

pub use answers::*;
pub use error::*;
pub use queries::*;
pub use requests::*;
