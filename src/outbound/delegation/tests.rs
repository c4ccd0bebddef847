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

#[test]
fn target_hash_changes_with_endpoint_and_seal() {
    use crate::store::outbound::{Registration, SealedCredential};
    let now = chrono::Utc::now();
    let r = Registration {
        id: "reg-1".into(),
        tenant_id: "t".into(),
        name: "n".into(),
        endpoint: "https://q.example/v1/a2a/agents/a/rpc".into(),
        credential: Some(SealedCredential {
            key_id: "k1".into(),
            nonce: vec![1; 12],
            ciphertext: vec![2; 32],
        }),
        discovered_card: None,
        discovered_at: None,
        deduplicates_message_ids: true,
        card_trust: Default::default(),
        created_by: "p".into(),
        created_at: now,
        updated_at: now,
    };
    let mut renamed = r.clone();
    renamed.name = "other".into();
    renamed.deduplicates_message_ids = false;
    assert_eq!(target_hash(&r), target_hash(&renamed));
    let mut moved = r.clone();
    moved.endpoint = "https://q.example/v1/a2a/agents/b/rpc".into();
    assert_ne!(target_hash(&r), target_hash(&moved));
    let mut resealed = r.clone();
    resealed.credential.as_mut().unwrap().nonce = vec![3; 12];
    assert_ne!(target_hash(&r), target_hash(&resealed));
    let mut bare = r.clone();
    bare.credential = None;
    assert_ne!(target_hash(&r), target_hash(&bare));
}
