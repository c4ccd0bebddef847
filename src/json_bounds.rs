//! How much a JSON document may become once parsed, checked on its bytes before it is parsed.
//!
//! A byte cap bounds what a remote may send, not what it becomes: serde_json turns
//! `[{"":0},{"":0},…]` into a B-tree node of about 630 bytes per 7 input bytes, so 64 KiB of
//! it would take some 6 MiB as a `Value`, and more again as typed structs. [`check`] walks the
//! bytes once, without building anything (its memory is a few words and a bit per level of
//! nesting, whatever the input), and refuses a document that nests deeper, holds more elements
//! or objects, or a longer string than a [`JsonBounds`] allows. Each bound set is sized so that
//! the densest document within it and its byte cap stays within a stated multiple of the cap
//! when parsed the gateway's way (`tests/json_memory.rs` measures it).
//!
//! The scanner is not a validator: what is not JSON passes it (or is refused for a bound it
//! exceeds) and is left to the parser to refuse. It counts
//!
//! - depth: the most containers open at once (a scalar at the top is depth 0);
//! - elements: array elements plus object members, at every level;
//! - objects: every `{`;
//! - the longest string, keys included, in raw bytes between its quotes (an escape counts as
//!   the bytes it is written with, which is never less than what it decodes to).

/// The most nesting any bound set may allow: the scanner's container stack is this many bits.
const STACK_BITS: usize = 128;

/// What one JSON document may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonBounds {
    /// Containers open at once.
    pub depth: usize,
    /// Array elements plus object members, counted at every level.
    pub elements: usize,
    /// Objects, counted at every level.
    pub objects: usize,
    /// Bytes of the longest string or key, escapes counted as written.
    pub string_bytes: usize,
}

/// A remote's agent card (at most `outbound.max_card_bytes`, 64 KiB). Room for a card of
/// some 40 skills with three tags and two examples each; the densest card within it and the
/// byte cap takes 3.3× the cap once parsed (`tests/json_memory.rs`).
pub const CARD: JsonBounds = JsonBounds {
    depth: 32,
    elements: 512,
    objects: 64,
    string_bytes: 16 * 1024,
};

/// A remote's JSON-RPC answer (at most `outbound.max_response_bytes`, 1 MiB): a task with
/// its history and artifacts, or a message. The densest answer within it and the byte cap
/// takes 4.7× the cap once parsed into the official types (`tests/json_memory.rs`).
pub const ANSWER: JsonBounds = JsonBounds {
    depth: 64,
    elements: 16 * 1024,
    objects: 2048,
    string_bytes: 1024 * 1024,
};

const _: () = assert!(CARD.depth <= STACK_BITS && ANSWER.depth <= STACK_BITS);

/// The first bound a document exceeds, with the bound's figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Exceeded {
    #[error("nested deeper than {0} levels")]
    Depth(usize),
    #[error("more than {0} array elements and object members")]
    Elements(usize),
    #[error("more than {0} objects")]
    Objects(usize),
    #[error("a string longer than {0} bytes")]
    String(usize),
}

/// Whether `json` stays within `bounds`; stops at the first bound exceeded.
pub fn check(json: &[u8], bounds: &JsonBounds) -> Result<(), Exceeded> {
    assert!(bounds.depth <= STACK_BITS, "depth bound over {STACK_BITS}");
    // Bit `d` set: the container at depth d + 1 is an array.
    let mut arrays: u128 = 0;
    let mut depth = 0usize;
    let mut elements = 0usize;
    let mut objects = 0usize;
    // In an array, before its next element: just after `[` or `,`.
    let mut awaiting_element = false;
    let mut bytes = json.iter();
    while let Some(&b) = bytes.next() {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            continue;
        }
        let in_array = depth > 0 && arrays & (1 << (depth - 1)) != 0;
        if in_array && awaiting_element && b != b']' {
            elements += 1;
            if elements > bounds.elements {
                return Err(Exceeded::Elements(bounds.elements));
            }
        }
        awaiting_element = false;
        match b {
            b'"' => {
                let mut length = 0usize;
                let mut escaped = false;
                for &c in bytes.by_ref() {
                    if !escaped && c == b'"' {
                        break;
                    }
                    escaped = !escaped && c == b'\\';
                    length += 1;
                    if length > bounds.string_bytes {
                        return Err(Exceeded::String(bounds.string_bytes));
                    }
                }
            }
            b'[' | b'{' => {
                if depth == bounds.depth {
                    return Err(Exceeded::Depth(bounds.depth));
                }
                if b == b'[' {
                    arrays |= 1 << depth;
                    awaiting_element = true;
                } else {
                    arrays &= !(1 << depth);
                    objects += 1;
                    if objects > bounds.objects {
                        return Err(Exceeded::Objects(bounds.objects));
                    }
                }
                depth += 1;
            }
            // An unbalanced close is the parser's to refuse.
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' => awaiting_element = in_array,
            b':' if !in_array && depth > 0 => {
                elements += 1;
                if elements > bounds.elements {
                    return Err(Exceeded::Elements(bounds.elements));
                }
            }
            // Scalars: only their first byte can start an element.
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: JsonBounds = JsonBounds {
        depth: 3,
        elements: 5,
        objects: 2,
        string_bytes: 4,
    };

    fn small(json: &str) -> Result<(), Exceeded> {
        check(json.as_bytes(), &SMALL)
    }

    #[test]
    fn depth_counts_open_containers_of_either_kind() {
        assert_eq!(small("[[[]]]"), Ok(()));
        assert_eq!(small(r#"{"a":[{"b":1}]}"#), Ok(()));
        assert_eq!(small("[[[[]]]]"), Err(Exceeded::Depth(3)));
        assert_eq!(small(r#"{"a":[{"b":[]}]}"#), Err(Exceeded::Depth(3)));
        // Closing brings it down again: siblings at the limit are fine.
        assert_eq!(small("[[[]],[[]]]"), Ok(()));
        assert_eq!(small("0"), Ok(()));
    }

    #[test]
    fn elements_are_array_elements_and_object_members_at_every_level() {
        assert_eq!(small("[0,1,2,3,4]"), Ok(()));
        assert_eq!(small("[0,1,2,3,4,5]"), Err(Exceeded::Elements(5)));
        // 3 members + 2 array elements.
        assert_eq!(small(r#"{"a":0,"b":[1,2],"c":""}"#), Ok(()));
        assert_eq!(
            small(r#"{"a":0,"b":[1,2,3],"c":""}"#),
            Err(Exceeded::Elements(5))
        );
        // Empty containers hold nothing; nested ones are elements of their parent.
        assert_eq!(small("[[],[],[],[],[]]"), Ok(()));
        assert_eq!(small("[[],[],[],[],[],[]]"), Err(Exceeded::Elements(5)));
        assert_eq!(small(" [ 10 , -2.5e3 , true , null , \"x\" ] "), Ok(()));
        // A scalar's bytes after its first are not elements.
        assert_eq!(small("[12345678,12345678,12345678]"), Ok(()));
    }

    #[test]
    fn objects_are_counted_at_every_level() {
        assert_eq!(small(r#"[{},{}]"#), Ok(()));
        assert_eq!(small(r#"[{},{},{}]"#), Err(Exceeded::Objects(2)));
        assert_eq!(small(r#"{"a":{"b":{}}}"#), Err(Exceeded::Objects(2)));
    }

    #[test]
    fn strings_and_keys_are_measured_raw_and_their_contents_are_not_structure() {
        assert_eq!(small(r#"["abcd"]"#), Ok(()));
        assert_eq!(small(r#"["abcde"]"#), Err(Exceeded::String(4)));
        assert_eq!(small(r#"{"abcde":0}"#), Err(Exceeded::String(4)));
        // Escapes count as written: `\"` is two bytes, `\\` two, `\u0041` six.
        assert_eq!(small(r#"["a\"b"]"#), Ok(()));
        assert_eq!(small(r#"["a\"bc"]"#), Err(Exceeded::String(4)));
        assert_eq!(small(r#"["\\\\"]"#), Ok(()));
        assert_eq!(small(r#"["\u0041"]"#), Err(Exceeded::String(4)));
        // An escaped backslash does not escape the closing quote.
        assert_eq!(small(r#"["\\",[],[],[]]"#), Ok(()));
        // Brackets, braces, commas and colons inside strings are text.
        assert_eq!(small(r#"["[{,", "]}:", "\"[{"]"#), Ok(()));
        let brackets = format!("[{}]", [r#""[[[""#; 5].join(","));
        assert_eq!(small(&brackets), Ok(()));
    }

    #[test]
    fn each_bound_set_admits_exactly_its_figures() {
        for bounds in [CARD, ANSWER] {
            let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
            assert_eq!(check(nested(bounds.depth).as_bytes(), &bounds), Ok(()));
            assert_eq!(
                check(nested(bounds.depth + 1).as_bytes(), &bounds),
                Err(Exceeded::Depth(bounds.depth))
            );
            let zeros = |n: usize| format!("[{}]", vec!["0"; n].join(","));
            assert_eq!(check(zeros(bounds.elements).as_bytes(), &bounds), Ok(()));
            assert_eq!(
                check(zeros(bounds.elements + 1).as_bytes(), &bounds),
                Err(Exceeded::Elements(bounds.elements))
            );
            let objects = |n: usize| format!("[{}]", vec!["{}"; n].join(","));
            assert_eq!(check(objects(bounds.objects).as_bytes(), &bounds), Ok(()));
            assert_eq!(
                check(objects(bounds.objects + 1).as_bytes(), &bounds),
                Err(Exceeded::Objects(bounds.objects))
            );
            let string = |n: usize| format!("\"{}\"", "x".repeat(n));
            assert_eq!(
                check(string(bounds.string_bytes).as_bytes(), &bounds),
                Ok(())
            );
            assert_eq!(
                check(string(bounds.string_bytes + 1).as_bytes(), &bounds),
                Err(Exceeded::String(bounds.string_bytes))
            );
        }
    }

    #[test]
    fn the_densest_card_of_the_findings_is_refused() {
        let dense = format!(
            "{{\"name\":\"x\",\"d\":[{}]}}",
            vec![r#"{"":0}"#; 8_000].join(",")
        );
        assert!(dense.len() < 64 * 1024);
        assert_eq!(
            check(dense.as_bytes(), &CARD),
            Err(Exceeded::Objects(CARD.objects))
        );
    }

    #[test]
    fn what_is_not_json_is_left_to_the_parser() {
        for text in [
            "",
            "]]]}}}",
            "[1,,2",
            r#"{"a" 1}"#,
            "\"abc",
            "[1,2,]",
            "nonsense",
            "\u{0}\u{ff}",
        ] {
            assert_eq!(small(text), Ok(()), "{text:?}");
            assert!(serde_json::from_str::<serde_json::Value>(text).is_err());
        }
        // Invalid, and over a bound: refused for the bound, before any parse.
        assert_eq!(small("[[[[[[[["), Err(Exceeded::Depth(3)));
        assert_eq!(small("]]]]]]]][[[["), Err(Exceeded::Depth(3)));
    }

    #[test]
    fn documents_the_parser_accepts_pass_within_generous_bounds() {
        let wide = JsonBounds {
            depth: 128,
            elements: usize::MAX,
            objects: usize::MAX,
            string_bytes: usize::MAX,
        };
        for text in [
            r#"{"jsonrpc":"2.0","id":"1","result":{"task":{"id":"t","history":[]}}}"#,
            r#"[{"a\\":"\\","b":"\"}"},[],{}]"#,
        ] {
            assert!(serde_json::from_str::<serde_json::Value>(text).is_ok());
            assert_eq!(check(text.as_bytes(), &wide), Ok(()));
        }
    }
}
