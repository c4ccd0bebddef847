//! The A2A 1.0 JSON-RPC binding: card, RPC route, and the protocol pieces each stage uses.

pub mod card;
pub mod cursor;
pub mod envelope;
pub mod methods;
pub mod observe;
pub mod rpc;
pub mod sse;
pub mod task_view;
pub mod validate;
pub mod version;
