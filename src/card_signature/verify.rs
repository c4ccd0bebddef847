//! Verifying a discovered card against the keys a tenant's admin trusts for that registration.
//!
//! A card is verified when at least one of its signatures is made, over its signed form
//! ([`super::form`]), by a trusted key under that key's `kid` and algorithm, **and** the card
//! names the registration's endpoint among its interfaces. The second condition is what ties
//! the card to the agent being called: cards are public documents, so a server could serve a
//! copy of another agent's signed card; that copy names the other agent's URL, not the
//! registered endpoint, and does not verify here.
//!
//! | `reason` | `verified` | When |
//! |---|---|---|
//! | `verified` | true | a trusted key verified a signature, and the card names the endpoint |
//! | `not_checked` | false | the registration's trust policy is `ignore` |
//! | `unsigned` | false | the card has no `signatures` |
//! | `malformed_card` | false | the card has no signed form (the SDK could not read it either) |
//! | `malformed_signature` | false | no signature is a well-formed JWS with `alg` and `kid` |
//! | `unsupported_header` | false | the header needs what the gateway does not implement (`crit`, `b64`) |
//! | `unknown_key` | false | no signature names a trusted `kid` |
//! | `algorithm_mismatch` | false | the trusted key of that `kid` is of another algorithm |
//! | `bad_signature` | false | a trusted key does not verify its signature (the card was changed, or signed by another key) |
//! | `endpoint_not_in_card` | false | a signature verified, but no interface of the card is the registered endpoint |
//!
//! When several signatures fail, the most telling reason is reported (the order above, from
//! `malformed_signature` to `bad_signature`) and `detail` lists each. At most
//! [`MAX_SIGNATURES`] signatures are checked.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::form;
use super::jws::{self, Rejection};
use super::keys::PublicKey;

/// Every `reason` a check by a policy other than `ignore` can report (the metric's series).
pub const REASONS: &[&str] = &[
    "verified",
    "unsigned",
    "malformed_card",
    "malformed_signature",
    "unsupported_header",
    "unknown_key",
    "algorithm_mismatch",
    "bad_signature",
    "endpoint_not_in_card",
];

/// Signatures of one card checked at most; a card rarely carries more than two (a key
/// rotation's overlap).
pub const MAX_SIGNATURES: usize = 16;

/// How a registration treats its remote's card signatures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrustPolicy {
    /// Signatures are not checked; the card is stored as untrusted metadata.
    #[default]
    Ignore,
    /// Checked and reported; the card is stored and delegation allowed either way.
    Prefer,
    /// Checked; an unverified card is not stored and delegation is refused until a verified
    /// one is.
    Require,
}

impl TrustPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            TrustPolicy::Ignore => "ignore",
            TrustPolicy::Prefer => "prefer",
            TrustPolicy::Require => "require",
        }
    }

    pub fn parse(s: &str) -> Option<TrustPolicy> {
        match s {
            "ignore" => Some(TrustPolicy::Ignore),
            "prefer" => Some(TrustPolicy::Prefer),
            "require" => Some(TrustPolicy::Require),
            _ => None,
        }
    }
}

/// The outcome of checking a card: what discovery reports and the registration records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    pub verified: bool,
    /// One of the table's reasons.
    pub reason: String,
    /// The trusted key that verified the card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    /// What each signature failed on, when none verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Verification {
    fn unverified(reason: &str, detail: Option<String>) -> Verification {
        Verification {
            verified: false,
            reason: reason.to_string(),
            kid: None,
            detail,
        }
    }

    /// The trust policy is `ignore`: nothing was checked.
    pub fn not_checked() -> Verification {
        Verification::unverified("not_checked", None)
    }
}

/// Checks `card`'s signatures against `trusted`, and that it names `endpoint`.
pub fn verify(card: &Value, trusted: &[PublicKey], endpoint: &str) -> Verification {
    let signatures = match card.get("signatures") {
        Some(Value::Array(list)) if !list.is_empty() => list,
        _ => return Verification::unverified("unsigned", None),
    };
    let signed_form = match form::signed_bytes(card) {
        Ok(bytes) => bytes,
        Err(e) => return Verification::unverified("malformed_card", Some(e.to_string())),
    };
    let mut failures: Vec<(Rejection, String)> = Vec::new();
    for (i, entry) in signatures.iter().take(MAX_SIGNATURES).enumerate() {
        let checked = jws::check(entry, &signed_form, trusted);
        match checked.outcome {
            Ok(()) => {
                if !names_endpoint(card, endpoint) {
                    return Verification::unverified(
                        "endpoint_not_in_card",
                        Some(format!(
                            "signature {} verified, but no interface of the card is the registered endpoint",
                            i + 1
                        )),
                    );
                }
                return Verification {
                    verified: true,
                    reason: "verified".into(),
                    kid: checked.kid,
                    detail: None,
                };
            }
            Err(rejection) => {
                let kid = checked
                    .kid
                    .map(|k| format!("kid {}", shown(&k)))
                    .unwrap_or_else(|| "no kid".into());
                failures.push((
                    rejection,
                    format!("signature {} ({kid}): {}", i + 1, rejection.reason()),
                ));
            }
        }
    }
    let worst = failures
        .iter()
        .map(|(r, _)| *r)
        .max()
        .unwrap_or(Rejection::Malformed);
    let detail = failures
        .into_iter()
        .map(|(_, d)| d)
        .collect::<Vec<_>>()
        .join("; ");
    Verification::unverified(worst.reason(), Some(detail))
}

/// A remote-chosen key id as shown in `detail`: printable, at most 64 characters.
fn shown(kid: &str) -> String {
    let mut shown: String = kid.chars().filter(|c| !c.is_control()).take(64).collect();
    if kid.chars().count() > 64 {
        shown.push('…');
    }
    format!("{shown:?}")
}

/// Whether one of the card's interfaces (as the SDK reads them) is `endpoint`, compared as
/// normalised URLs, a trailing `/` aside.
fn names_endpoint(card: &Value, endpoint: &str) -> bool {
    let normal = |url: &str| {
        url::Url::parse(url).ok().map(|mut u| {
            u.set_fragment(None);
            u.as_str().trim_end_matches('/').to_string()
        })
    };
    let Some(endpoint) = normal(endpoint) else {
        return false;
    };
    let Ok(view) = form::sdk_view(card) else {
        return false;
    };
    view.get("supportedInterfaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| i.get("url").and_then(Value::as_str))
        .any(|url| normal(url).as_deref() == Some(endpoint.as_str()))
}

#[cfg(test)]
mod tests;
