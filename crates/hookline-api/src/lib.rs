//! The wire types of [hookline](https://github.com/hookline/hookline)'s HTTP API: each request
//! body ([`requests`]), query string ([`queries`]), answer ([`answers`]) and the error envelope
//! ([`error`]), exactly as the server parses and answers them.
//!
//! They are one source for both ends: the server (the `hookline` crate) parses its requests
//! into these types, builds its answers as these types and describes them in its OpenAPI
//! document from them (feature `openapi`, which derives `utoipa::ToSchema`), and the Rust
//! client (`hookline-client`) sends and reads the same types. A field cannot be answered
//! without being described, nor described without a client seeing it.
//!
//! Requests refuse unknown fields, as the server does; answers ignore fields they do not know,
//! so a client built against an older release keeps reading a newer server's answers.
//!
//! ```
//! use hookline_api::{NewSubscriber, Receipt};
//!
//! let create = NewSubscriber {
//!     url: "https://hooks.acme.example/hookline".into(),
//!     event_types: Some(vec!["shipment.out_for_delivery".into()]),
//!     ..NewSubscriber::default()
//! };
//! // Fields left `None` are not sent.
//! assert_eq!(
//!     serde_json::to_string(&create).unwrap(),
//!     r#"{"url":"https://hooks.acme.example/hookline","event_types":["shipment.out_for_delivery"]}"#
//! );
//!
//! // A newer server's extra field is ignored.
//! let receipt: Receipt = serde_json::from_str(
//!     r#"{"id": "evt_1", "tenant_id": null, "type": "shipment.out_for_delivery",
//!         "ordering_key": null, "deliveries": 2, "unversioned": 0, "added_later": true}"#,
//! )
//! .unwrap();
//! assert_eq!(receipt.deliveries, 2);
//! ```

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
