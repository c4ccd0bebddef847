//! Opaque ListTasks page tokens.
//!
//! A token is `base64url(payload) "." base64url(tag)`, where the payload holds the position
//! after the page's last task `(status_timestamp, task_id)` and a digest of the owner and the
//! filters it was issued for, and the tag is an HMAC-SHA256 (truncated to 16 bytes) under the
//! gateway's cursor key. A token that was altered, issued under another key, or presented by
//! another principal, for another agent or with other filters is refused with -32602: the
//! listing never silently restarts or skips.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::store::{state_name, ListFilter, ListPosition, Owner};

type HmacSha256 = Hmac<Sha256>;

const TAG_BYTES: usize = 16;

#[derive(Serialize, Deserialize)]
struct Payload {
    v: u8,
    /// status timestamp, microseconds since the epoch (PostgreSQL's precision).
    ts: i64,
    id: Uuid,
    /// Digest of owner and filters.
    q: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("pageToken is malformed")]
    Malformed,
    #[error("pageToken was not issued by this service or was altered")]
    BadSignature,
    #[error("pageToken belongs to a different listing (caller, agent or filters changed)")]
    Foreign,
}

/// Signs and checks page tokens.
#[derive(Clone)]
pub struct CursorCodec {
    key: Vec<u8>,
}

impl std::fmt::Debug for CursorCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorCodec")
    }
}

fn scope_digest(owner: &Owner, filter: &ListFilter) -> String {
    let mut h = Sha256::new();
    for part in [
        owner.tenant_id.as_str(),
        owner.principal_id.as_str(),
        owner.agent_id.as_str(),
        &filter.context_id.map(|c| c.to_string()).unwrap_or_default(),
        &filter.state.as_ref().map(state_name).unwrap_or_default(),
        &filter
            .status_timestamp_after
            .map(|t| t.timestamp_micros().to_string())
            .unwrap_or_default(),
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(&h.finalize()[..16])
}

impl CursorCodec {
    pub fn new(key: &[u8]) -> Self {
        CursorCodec { key: key.to_vec() }
    }

    fn tag(&self, payload: &[u8]) -> Vec<u8> {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(payload);
        mac.finalize().into_bytes()[..TAG_BYTES].to_vec()
    }

    pub fn encode(&self, owner: &Owner, filter: &ListFilter, position: ListPosition) -> String {
        let payload = serde_json::to_vec(&Payload {
            v: 1,
            ts: position.status_timestamp.timestamp_micros(),
            id: position.task_id,
            q: scope_digest(owner, filter),
        })
        .expect("payload serializes");
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(self.tag(&payload))
        )
    }

    pub fn decode(
        &self,
        token: &str,
        owner: &Owner,
        filter: &ListFilter,
    ) -> Result<ListPosition, CursorError> {
        if token.len() > 512 {
            return Err(CursorError::Malformed);
        }
        let (payload, tag) = token.split_once('.').ok_or(CursorError::Malformed)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| CursorError::Malformed)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| CursorError::Malformed)?;
        if tag.len() != TAG_BYTES {
            return Err(CursorError::BadSignature);
        }
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(&payload);
        mac.verify_truncated_left(&tag)
            .map_err(|_| CursorError::BadSignature)?;
        let payload: Payload =
            serde_json::from_slice(&payload).map_err(|_| CursorError::Malformed)?;
        if payload.v != 1 {
            return Err(CursorError::Malformed);
        }
        if payload.q != scope_digest(owner, filter) {
            return Err(CursorError::Foreign);
        }
        let status_timestamp: DateTime<Utc> =
            DateTime::from_timestamp_micros(payload.ts).ok_or(CursorError::Malformed)?;
        Ok(ListPosition {
            status_timestamp,
            task_id: payload.id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(p: &str) -> Owner {
        Owner {
            tenant_id: "t".into(),
            principal_id: p.into(),
            agent_id: "a".into(),
        }
    }

    fn position() -> ListPosition {
        ListPosition {
            status_timestamp: DateTime::from_timestamp_micros(1_790_000_000_123_456).unwrap(),
            task_id: Uuid::new_v4(),
        }
    }

    #[test]
    fn round_trips() {
        let codec = CursorCodec::new(b"k");
        let p = position();
        let f = ListFilter::default();
        let token = codec.encode(&owner("p"), &f, p);
        assert_eq!(codec.decode(&token, &owner("p"), &f), Ok(p));
    }

    #[test]
    fn refuses_tampering_other_keys_and_foreign_scopes() {
        let codec = CursorCodec::new(b"k");
        let f = ListFilter::default();
        let token = codec.encode(&owner("p"), &f, position());
        // Flip one payload character.
        let mut bytes = token.clone().into_bytes();
        bytes[3] = if bytes[3] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert!(codec.decode(&tampered, &owner("p"), &f).is_err());
        assert_eq!(
            CursorCodec::new(b"other").decode(&token, &owner("p"), &f),
            Err(CursorError::BadSignature)
        );
        assert_eq!(
            codec.decode(&token, &owner("q"), &f),
            Err(CursorError::Foreign)
        );
        let filtered = ListFilter {
            state: Some(a2a::TaskState::Completed),
            ..Default::default()
        };
        assert_eq!(
            codec.decode(&token, &owner("p"), &filtered),
            Err(CursorError::Foreign)
        );
        assert_eq!(
            codec.decode("garbage", &owner("p"), &f),
            Err(CursorError::Malformed)
        );
        assert_eq!(
            codec.decode("", &owner("p"), &f),
            Err(CursorError::Malformed)
        );
        // A truncated tag is not accepted.
        let (payload, tag) = token.split_once('.').unwrap();
        let short = format!("{payload}.{}", &tag[..4]);
        assert!(codec.decode(&short, &owner("p"), &f).is_err());
    }
}
