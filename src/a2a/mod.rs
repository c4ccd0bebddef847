//! The A2A 1.0 JSON-RPC binding: the per-agent card and RPC routes (the hosted profile), the
//! task service behind them, and the protocol pieces each stage uses.

pub mod caller;
pub mod card;
pub mod card_keys;
pub mod cursor;
pub mod envelope;
pub mod method;
pub mod observe;
pub mod rpc;
pub mod sse;
pub mod task_view;
pub mod tasks;
pub mod validate;
pub mod version;

use std::sync::Arc;

use crate::http::authorize::Authorizer;
use caller::AgentAccess;
use tasks::TaskService;

/// What the profile routes (card and RPC) use, built once at start-up.
pub struct ProfileRoutes {
    pub authorizer: Arc<Authorizer>,
    pub agents: AgentAccess,
    pub tasks: Arc<TaskService>,
    /// Absolute URLs in cards come only from here, never from request headers.
    pub public_base: String,
    /// Largest accepted request body, bytes.
    pub max_body_bytes: usize,
    /// Each agent's served card: body and `ETag`, made once per content, and its
    /// `Last-Modified` date.
    pub served_cards: card::ServedCards,
    /// Signs the cards (or serves them unsigned) and makes their `ETag`.
    pub card_signer: crate::card_signature::CardSigner,
}
