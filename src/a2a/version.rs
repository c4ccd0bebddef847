//! `A2A-Version` negotiation.
//!
//! Accepted: `1.0` and its patch revisions (`1.0.x`). A missing or empty header means 0.3 (spec
//! §3.6) and is refused, like `1.1`, `0.3`, `2.0` and anything unparsable: -32009. The gateway
//! never silently downgrades and never reads the version from anywhere but the header.

use axum::http::HeaderMap;

pub const HEADER: &str = "A2A-Version";

/// The version a request asked for, when it is not one this gateway speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub String);

/// Checks the request's version header.
pub fn negotiate(headers: &HeaderMap) -> Result<(), Unsupported> {
    let mut values = headers.get_all(HEADER).iter();
    let first = values.next();
    // A repeated header is ambiguous; refuse rather than pick one.
    if values.next().is_some() {
        return Err(Unsupported("multiple values".into()));
    }
    let raw = match first {
        None => return Err(Unsupported("0.3".into())),
        Some(v) => match v.to_str() {
            Ok(s) => s.trim(),
            Err(_) => return Err(Unsupported("(not text)".into())),
        },
    };
    if raw.is_empty() {
        return Err(Unsupported("0.3".into()));
    }
    if is_one_zero(raw) {
        Ok(())
    } else {
        Err(Unsupported(raw.chars().take(32).collect()))
    }
}

/// `1.0` or `1.0.<digits>`.
fn is_one_zero(v: &str) -> bool {
    match v.strip_prefix("1.0") {
        Some("") => true,
        Some(rest) => rest.strip_prefix('.').is_some_and(|patch| {
            !patch.is_empty() && patch.len() <= 9 && patch.bytes().all(|b| b.is_ascii_digit())
        }),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(value: Option<&str>) -> Result<(), Unsupported> {
        let mut h = HeaderMap::new();
        if let Some(v) = value {
            h.insert(HEADER, v.parse().unwrap());
        }
        negotiate(&h)
    }

    #[test]
    fn accepts_one_zero_and_patches() {
        for v in ["1.0", "1.0.0", "1.0.5", "1.0.123", " 1.0 "] {
            assert_eq!(check(Some(v)), Ok(()), "{v}");
        }
    }

    #[test]
    fn missing_or_empty_means_zero_three() {
        assert_eq!(check(None), Err(Unsupported("0.3".into())));
        assert_eq!(check(Some("")), Err(Unsupported("0.3".into())));
    }

    #[test]
    fn refuses_other_revisions_and_garbage() {
        for v in [
            "1.1", "0.3", "2.0", "abc", "1", "1.00", "1.0.", "1.0.x", "1.0-beta", "10.0", "1.01",
        ] {
            assert!(check(Some(v)).is_err(), "{v} must be refused");
        }
    }

    #[test]
    fn repeated_header_is_refused() {
        let mut h = HeaderMap::new();
        h.append(HEADER, "1.0".parse().unwrap());
        h.append(HEADER, "1.0".parse().unwrap());
        assert!(negotiate(&h).is_err());
    }
}
