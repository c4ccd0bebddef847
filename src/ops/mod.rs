//! Operators' one-shot commands beside `serve` (docs/operations.md): one tenant's data exported
//! as JSON lines ([`export`]) and deleted ([`offboard`]), and stored credentials sealed again
//! under the active key ([`reseal`]). Each works in batches by key, so a run
//! that stops anywhere is finished by running it again.

pub mod export;
pub mod offboard;
pub mod reseal;

/// Default rows per batch of the tenant commands.
pub const DEFAULT_BATCH: i64 = 500;
