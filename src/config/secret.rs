//! The one type for configuration values that must never be printed.

use serde::Deserialize;

/// A configuration value that must never be printed: tokens, keys, and connection URLs (which
/// may carry a password). `Debug` and `Display` show `<redacted>` (or `""` when unset, which
/// reveals nothing and tells an unset value from a set one); the value itself is reached only
/// through [`SecretString::expose`], so every use is visible at the call site.
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(value: impl Into<String>) -> Self {
        SecretString(value.into())
    }

    /// The secret itself: only for handing it to the component that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value read as a URL, without its password, for logs and diagnostics: the userinfo
    /// password and `password`/`pass` query parameters (PostgreSQL and Redis accept both) are
    /// dropped. A value that does not parse as a URL (e.g. a libpq `key=value` string) may hold a
    /// password anywhere, so it is not shown at all.
    pub fn url_without_password(&self) -> String {
        let Ok(mut url) = url::Url::parse(&self.0) else {
            return "<redacted>".into();
        };
        if url.password().is_some() {
            // Fails only for URLs that cannot have userinfo, which then carry no password.
            let _ = url.set_password(None);
        }
        let secret_query =
            |k: &str| k.eq_ignore_ascii_case("password") || k.eq_ignore_ascii_case("pass");
        if url.query_pairs().any(|(k, _)| secret_query(&k)) {
            let kept: Vec<(String, String)> = url
                .query_pairs()
                .filter(|(k, _)| !secret_query(k))
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            if kept.is_empty() {
                url.set_query(None);
            } else {
                url.query_pairs_mut().clear().extend_pairs(kept);
            }
        }
        url.to_string()
    }
}

impl From<String> for SecretString {
    fn from(value: String) -> Self {
        SecretString(value)
    }
}

impl From<&str> for SecretString {
    fn from(value: &str) -> Self {
        SecretString(value.to_owned())
    }
}

impl std::fmt::Debug for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<redacted>"
        })
    }
}

impl std::fmt::Display for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "" } else { "<redacted>" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_redact() {
        let s = SecretString::from("hunter2");
        assert_eq!(format!("{s:?}"), "<redacted>");
        assert_eq!(format!("{s}"), "<redacted>");
        assert_eq!(s.expose(), "hunter2");
        assert_eq!(format!("{:?}", SecretString::default()), "\"\"");
    }

    #[test]
    fn deserializes_from_a_plain_string() {
        #[derive(Deserialize)]
        struct File {
            token: SecretString,
        }
        let f: File = toml::from_str("token = \"abc\"").unwrap();
        assert_eq!(f.token.expose(), "abc");
    }

    #[test]
    fn url_without_password_keeps_everything_else() {
        let cases = [
            (
                "postgres://gw:s3cret@db.internal:5432/q_a2a?sslmode=require",
                "postgres://gw@db.internal:5432/q_a2a?sslmode=require",
            ),
            ("redis://:s3cret@cache:6379/0", "redis://cache:6379/0"),
            ("rediss://user:s3cret@cache/", "rediss://user@cache/"),
            (
                "postgres://gw@db/q_a2a?password=s3cret&sslmode=require",
                "postgres://gw@db/q_a2a?sslmode=require",
            ),
            (
                "redis+unix:///run/redis.sock?pass=s3cret",
                "redis+unix:///run/redis.sock",
            ),
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        ];
        for (url, shown) in cases {
            let rendered = SecretString::from(url).url_without_password();
            assert_eq!(rendered, shown, "{url}");
            assert!(!rendered.contains("s3cret"));
        }
        let keyword = SecretString::from("host=db user=gw password=s3cret");
        assert_eq!(keyword.url_without_password(), "<redacted>");
    }
}
