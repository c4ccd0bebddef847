//! What a remote agent sends is stored in PostgreSQL, whose `text` and `jsonb` cannot hold the
//! NUL character that JSON can (`\u0000`): one such character in an answer would make every
//! write of the delegation fail and leave it stuck. Strings from a remote are stored and
//! returned with each NUL replaced by U+FFFD.

use serde_json::Value;

/// `value` with every NUL in its strings and keys replaced by U+FFFD. Changed in place: a
/// document without NUL is walked, not rebuilt, so this costs no memory beside it.
pub fn without_nul(mut value: Value) -> Value {
    replace_nul(&mut value);
    value
}

fn replace_nul(value: &mut Value) {
    match value {
        Value::String(s) => replace_in(s),
        Value::Array(items) => items.iter_mut().for_each(replace_nul),
        Value::Object(map) => {
            let keyed: Vec<String> = map.keys().filter(|k| k.contains('\0')).cloned().collect();
            for key in keyed {
                if let Some(v) = map.remove(&key) {
                    map.insert(text_without_nul(key), v);
                }
            }
            map.values_mut().for_each(replace_nul);
        }
        _ => {}
    }
}

fn replace_in(s: &mut String) {
    if s.contains('\0') {
        *s = s.replace('\0', "\u{FFFD}");
    }
}

pub fn text_without_nul(mut s: String) -> String {
    replace_in(&mut s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replaces_nul_in_strings_and_keys_and_keeps_the_rest() {
        let v = json!({"a\u{0}": ["x\u{0}y", 1, null, {"b": "\u{0}", "k\u{0}\u{0}": {"c\u{0}": "\u{0}"}}], "c": true});
        assert_eq!(
            without_nul(v),
            json!({"a\u{FFFD}": ["x\u{FFFD}y", 1, null, {"b": "\u{FFFD}", "k\u{FFFD}\u{FFFD}": {"c\u{FFFD}": "\u{FFFD}"}}], "c": true})
        );
        assert_eq!(without_nul(json!("plain")), json!("plain"));
    }
}
