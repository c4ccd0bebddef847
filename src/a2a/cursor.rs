//! Opaque page tokens: ListTasks' and the registration listing's (`GET /v1/a2a/agents`).
//!
//! A token is `base64url(payload) "." base64url(tag)`, where the payload holds the position
//! after the page's last item and a digest of the listing it was issued for, and the tag is an
//! HMAC-SHA256 (truncated to 16 bytes) under the gateway's cursor key.
//!
//! - ListTasks: the position `(status_timestamp, task_id)`; the listing is the owner (tenant,
//!   principal, agent) and the filters.
//! - Registrations: the position `(created_at, registration_id)`; the listing is the caller's
//!   tenant and principal.
//!
//! A token that was altered, issued under another key, or presented for another listing (by
//! another caller, for another agent, with other filters, or one kind's token to the other) is
//! refused (-32602, or HTTP 400): a listing never silently restarts or skips.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::store::outbound::RegistrationPosition;
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

/// A registration listing's position.
#[derive(Serialize, Deserialize)]
struct RegistrationPayload {
    v: u8,
    /// `created_at`, microseconds since the epoch (PostgreSQL's precision).
    ts: i64,
    id: String,
    /// Digest of the listing: its kind, the tenant and the principal.
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

fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for part in parts {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(&h.finalize()[..16])
}

fn scope_digest(owner: &Owner, filter: &ListFilter) -> String {
    digest(&[
        owner.tenant_id.as_str(),
        owner.principal_id.as_str(),
        owner.agent_id.as_str(),
        &filter.context_id.map(|c| c.to_string()).unwrap_or_default(),
        &filter.state.as_ref().map(state_name).unwrap_or_default(),
        &filter
            .status_timestamp_after
            .map(|t| t.timestamp_micros().to_string())
            .unwrap_or_default(),
    ])
}

/// The kind comes first, so no ListTasks digest (whose first part is a tenant) can equal it.
fn registrations_digest(tenant_id: &str, principal_id: &str) -> String {
    digest(&["registrations", tenant_id, principal_id])
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

    /// `payload` signed, as a token.
    fn seal(&self, payload: &impl Serialize) -> String {
        let payload = serde_json::to_vec(payload).expect("payload serializes");
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(self.tag(&payload))
        )
    }

    /// The payload of a token this codec signed.
    fn open<T: DeserializeOwned>(&self, token: &str) -> Result<T, CursorError> {
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
        serde_json::from_slice(&payload).map_err(|_| CursorError::Malformed)
    }

    pub fn encode(&self, owner: &Owner, filter: &ListFilter, position: ListPosition) -> String {
        self.seal(&Payload {
            v: 1,
            ts: position.status_timestamp.timestamp_micros(),
            id: position.task_id,
            q: scope_digest(owner, filter),
        })
    }

    pub fn decode(
        &self,
        token: &str,
        owner: &Owner,
        filter: &ListFilter,
    ) -> Result<ListPosition, CursorError> {
        let payload: Payload = self.open(token)?;
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

    /// A registration listing's token for `tenant_id` and `principal_id`.
    pub fn encode_registrations(
        &self,
        tenant_id: &str,
        principal_id: &str,
        position: &RegistrationPosition,
    ) -> String {
        self.seal(&RegistrationPayload {
            v: 1,
            ts: position.created_at.timestamp_micros(),
            id: position.registration_id.clone(),
            q: registrations_digest(tenant_id, principal_id),
        })
    }

    pub fn decode_registrations(
        &self,
        token: &str,
        tenant_id: &str,
        principal_id: &str,
    ) -> Result<RegistrationPosition, CursorError> {
        let payload: RegistrationPayload = self.open(token)?;
        if payload.v != 1 {
            return Err(CursorError::Malformed);
        }
        if payload.q != registrations_digest(tenant_id, principal_id) {
            return Err(CursorError::Foreign);
        }
        Ok(RegistrationPosition {
            created_at: DateTime::from_timestamp_micros(payload.ts)
                .ok_or(CursorError::Malformed)?,
            registration_id: payload.id,
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

    fn registration_position() -> RegistrationPosition {
        RegistrationPosition {
            created_at: DateTime::from_timestamp_micros(1_790_000_000_123_456).unwrap(),
            registration_id: format!("reg-{}", Uuid::new_v4()),
        }
    }

    #[test]
    fn registration_tokens_round_trip_and_refuse_other_listings() {
        let codec = CursorCodec::new(b"k");
        let p = registration_position();
        let token = codec.encode_registrations("t", "admin", &p);
        assert_eq!(codec.decode_registrations(&token, "t", "admin"), Ok(p));
        assert_eq!(
            codec.decode_registrations(&token, "t2", "admin"),
            Err(CursorError::Foreign)
        );
        assert_eq!(
            codec.decode_registrations(&token, "t", "other"),
            Err(CursorError::Foreign)
        );
        assert_eq!(
            CursorCodec::new(b"other").decode_registrations(&token, "t", "admin"),
            Err(CursorError::BadSignature)
        );
        let mut bytes = token.into_bytes();
        bytes[5] = if bytes[5] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert!(codec.decode_registrations(&tampered, "t", "admin").is_err());
        assert_eq!(
            codec.decode_registrations("", "t", "admin"),
            Err(CursorError::Malformed)
        );
    }

    #[test]
    fn a_token_of_one_kind_is_refused_as_the_other() {
        let codec = CursorCodec::new(b"k");
        let f = ListFilter::default();
        let tasks = codec.encode(&owner("p"), &f, position());
        assert!(codec.decode_registrations(&tasks, "t", "p").is_err());
        let registrations = codec.encode_registrations("t", "p", &registration_position());
        assert!(codec.decode(&registrations, &owner("p"), &f).is_err());
    }
}
