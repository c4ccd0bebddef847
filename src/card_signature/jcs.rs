//! RFC 8785 JSON Canonicalization Scheme (JCS): the one serialisation of a JSON value that
//! signer and verifier both produce, so a signature over it survives any re-encoding of the
//! document in between.
//!
//! - Objects: members sorted by the UTF-16 code units of their names (§3.2.3), which is not the
//!   order of Rust's `str` comparison for names holding characters above U+FFFF.
//! - Strings: only `"`, `\` and U+0000..U+001F escaped, with the short forms `\b \f \n \r \t`
//!   and lowercase `\u00xx` otherwise; everything else is literal UTF-8 (§3.2.2.2).
//! - Numbers: IEEE 754 doubles written as ECMAScript's `Number::toString` writes them
//!   (§3.2.2.3): the shortest digits that round-trip, plain notation from 1e-6 up to below
//!   1e21, exponential (`1e+21`, `1e-7`) outside it, `-0` as `0`. Every JSON number is a
//!   double here, integers included, as in I-JSON (RFC 7493).
//! - Nesting deeper than [`MAX_DEPTH`] is refused, like the official Python SDK's
//!   canonicaliser: card extensions nest arbitrarily and nothing should recurse without bound.

use serde_json::Value;

/// Deepest nesting accepted, the official Python SDK's bound (`a2a.utils._jcs.MAX_DEPTH`).
pub const MAX_DEPTH: usize = 128;

/// A value without a canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    #[error("nesting exceeds the maximum depth of {MAX_DEPTH}")]
    TooDeep,
    #[error("{0} is not a finite JSON number")]
    NotFinite(String),
}

/// The canonical UTF-8 bytes of `value`.
pub fn canonicalize(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    let mut out = String::new();
    write(value, &mut out, 0)?;
    Ok(out.into_bytes())
}

fn write(value: &Value, out: &mut String, depth: usize) -> Result<(), CanonicalError> {
    if depth > MAX_DEPTH {
        return Err(CanonicalError::TooDeep);
    }
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let v = n
                .as_f64()
                .ok_or_else(|| CanonicalError::NotFinite(n.to_string()))?;
            out.push_str(&number(v)?);
        }
        Value::String(s) => quote(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out, depth + 1)?;
            }
            out.push(']');
        }
        Value::Object(members) => {
            let mut sorted: Vec<(Vec<u16>, &String, &Value)> = members
                .iter()
                .map(|(k, v)| (k.encode_utf16().collect(), k, v))
                .collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            out.push('{');
            for (i, (_, key, value)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                quote(key, out);
                out.push(':');
                write(value, out, depth + 1)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

fn quote(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// ECMA-262 `Number::toString(v)` (7.1.12.1), as RFC 8785 §3.2.2.3 requires.
pub fn number(v: f64) -> Result<String, CanonicalError> {
    if !v.is_finite() {
        return Err(CanonicalError::NotFinite(v.to_string()));
    }
    if v == 0.0 {
        return Ok("0".into());
    }
    if v < 0.0 {
        return Ok(format!("-{}", number(-v)?));
    }
    // Rust's `{:e}` writes the shortest digits that round-trip (the `s` and `k` of the
    // ECMAScript algorithm) and their exponent, e.g. `1.2345e-7`. When two such digit strings
    // are equally close to the value, ECMAScript takes the even one, which `{:e}` does not
    // promise; the correctly rounded digits of the same length (`{:.N$e}`, ties to even) are
    // that one whenever they round-trip too.
    let mut scientific = format!("{v:e}");
    let significant = scientific
        .split('e')
        .next()
        .map_or(1, |m| m.chars().filter(char::is_ascii_digit).count());
    let nearest = format!("{v:.*e}", significant - 1);
    if nearest != scientific && nearest.parse::<f64>().ok() == Some(v) {
        scientific = nearest;
    }
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("{:e} always writes an exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exponent: i32 = exponent.parse().expect("{:e} writes an integer exponent");
    let k = digits.len() as i32;
    // The position of the decimal point relative to the digits.
    let n = exponent + 1;
    Ok(if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(n as usize);
        format!("{int}.{frac}")
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let sign = if e < 0 { '-' } else { '+' };
        let (first, rest) = digits.split_at(1);
        if rest.is_empty() {
            format!("{first}e{sign}{}", e.abs())
        } else {
            format!("{first}.{rest}e{sign}{}", e.abs())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canonical(text: &str) -> String {
        let value: Value = serde_json::from_str(text).unwrap();
        String::from_utf8(canonicalize(&value).unwrap()).unwrap()
    }

    /// RFC 8785 §3.2.2, the sample of §3.2.3 and its UTF-8 bytes in §3.2.4.
    #[test]
    fn rfc_8785_main_example() {
        let input = r#"{
          "numbers": [333333333.33333329, 1E30, 4.50,
                      2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#;
        let expected = r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#;
        assert_eq!(canonical(input), expected);
        let hex: Vec<String> = canonical(input)
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        let rfc_bytes = "7b 22 6c 69 74 65 72 61 6c 73 22 3a 5b 6e 75 6c 6c 2c 74 72 \
            75 65 2c 66 61 6c 73 65 5d 2c 22 6e 75 6d 62 65 72 73 22 3a 5b 33 33 33 33 33 33 \
            33 33 33 2e 33 33 33 33 33 33 33 2c 31 65 2b 33 30 2c 34 2e 35 2c 30 2e 30 30 32 \
            2c 31 65 2d 32 37 5d 2c 22 73 74 72 69 6e 67 22 3a 22 e2 82 ac 24 5c 75 30 30 30 \
            66 5c 6e 41 27 42 5c 22 5c 5c 5c 5c 5c 22 2f 22 7d";
        assert_eq!(hex.join(" "), rfc_bytes);
    }

    /// RFC 8785 §3.2.3: names sorted by UTF-16 code units, so the emoji (a surrogate pair,
    /// D83D DE00) comes before U+FB33, which code point order would reverse.
    #[test]
    fn rfc_8785_sorting_example() {
        let input = r#"{
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One",
          "\ud83d\ude00": "Emoji: Grinning Face",
          "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
            \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
            \"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(canonical(input), expected);
    }

    /// RFC 8785 Appendix B: IEEE 754 values and their canonical text.
    #[test]
    fn rfc_8785_number_samples() {
        let samples = [
            (0x0000000000000000u64, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, expected) in samples {
            let v = f64::from_bits(bits);
            assert_eq!(number(v).unwrap(), expected, "{bits:016x}");
            // The canonical text reads back as the same double (serde_json parses with
            // `float_roundtrip`, as a verifier must).
            let back: f64 = serde_json::from_str(expected).unwrap();
            assert_eq!(
                back.to_bits(),
                if v == 0.0 { 0 } else { bits },
                "{expected}"
            );
        }
        // Appendix B's NaN and Infinity have no JSON form.
        assert!(number(f64::from_bits(0x7fffffffffffffff)).is_err());
        assert!(number(f64::from_bits(0x7ff0000000000000)).is_err());
    }

    #[test]
    fn integers_are_doubles_and_escapes_are_minimal() {
        assert_eq!(
            canonical("[1, -0, 1.0, 100, 1e2, 12345678901234567890]"),
            "[1,0,1,100,100,12345678901234567000]"
        );
        assert_eq!(
            canonical(r#""\u0000\u001f\u007f\u2028\/""#),
            "\"\\u0000\\u001f\u{7f}\u{2028}/\""
        );
        assert_eq!(canonical(r#"{"b":[],"a":{}}"#), r#"{"a":{},"b":[]}"#);
    }

    #[test]
    fn nesting_is_bounded() {
        let mut deep = json!(1);
        for _ in 0..=MAX_DEPTH {
            deep = json!([deep]);
        }
        assert_eq!(canonicalize(&deep), Err(CanonicalError::TooDeep));
        let mut ok = json!(1);
        for _ in 0..MAX_DEPTH {
            ok = json!([ok]);
        }
        assert!(canonicalize(&ok).is_ok());
    }
}
