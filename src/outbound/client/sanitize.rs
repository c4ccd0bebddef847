//! What a remote agent sends is stored in PostgreSQL, whose `text` and `jsonb` cannot hold the
//! NUL character that JSON can (`\u0000`): one such character in an answer would make every
//! write of the delegation fail and leave it stuck. Strings from a remote are stored and
//! returned with each NUL replaced by U+FFFD.

use serde_json::Value;

/// `value` with every NUL in its strings and keys replaced by U+FFFD.
pub fn without_nul(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(text_without_nul(s)),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nul).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (text_without_nul(k), without_nul(v)))
                .collect(),
        ),
        other => other,
    }
}

pub fn text_without_nul(s: String) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{FFFD}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replaces_nul_in_strings_and_keys_and_keeps_the_rest() {
        let v = json!({"a\u{0}": ["x\u{0}y", 1, null, {"b": "\u{0}"}], "c": true});
        assert_eq!(
            without_nul(v),
            json!({"a\u{FFFD}": ["x\u{FFFD}y", 1, null, {"b": "\u{FFFD}"}], "c": true})
        );
        assert_eq!(without_nul(json!("plain")), json!("plain"));
    }
}
