//! The delegation content hash and status mapping.

use super::*;

#[test]
fn content_hash_separates_agent_and_text() {
    assert_ne!(content_hash("reg-a", "bc"), content_hash("reg-ab", "c"));
    assert_eq!(content_hash("reg-a", "x"), content_hash("reg-a", "x"));
}

#[test]
fn statuses() {
    assert_eq!(status_of(&TaskState::AuthRequired), "input_required");
    assert!(settled("completed") && !settled("working") && !settled("unknown"));
}
