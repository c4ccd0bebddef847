//! The log lines' span fields as one JSON object, added to in place.
//!
//! The request span gets most of its fields after it starts (tenant and principal once the
//! caller is authenticated, the JSON-RPC method once the envelope is read, the trace id once the
//! trace is continued). `tracing_subscriber`'s own `JsonFields` answers every such
//! `Span::record` by parsing the span's fields back into a map and serialising them again:
//! about a dozen allocations per field, on every request, whether or not a line is ever logged
//! in that span. [`SpanFields`] writes the same object: the first fields as `{...}`, a later
//! field appended before the closing brace, with no allocation beyond the string's growth.
//!
//! A field recorded twice appears twice in the stored object; a log line's formatter reads the
//! object back as a map (`tracing_subscriber`'s JSON event format does), where the later value
//! wins, as it does with `JsonFields`.

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FormatFields, FormattedFields};

/// Formats span fields as a JSON object (see the module documentation).
#[derive(Debug, Default, Clone, Copy)]
pub struct SpanFields;

impl<'writer> FormatFields<'writer> for SpanFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        // Written on the stack first: the formatter's string then grows once to its size,
        // not once per doubling as the fields come.
        let mut staged = Staged::default();
        staged.write_char('{')?;
        let mut object = JsonObject::new(&mut staged, true);
        fields.record(&mut object);
        object.result?;
        staged.write_char('}')?;
        writer.write_str(staged.as_str())
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let object = &mut current.fields;
        // Not an object this formatter wrote (nothing yet): write one.
        if object.pop() != Some('}') {
            object.clear();
            return self.format_fields(current.as_writer(), fields);
        }
        let first = object.len() == 1;
        // Room for the fields a request adds after its start (tenant, principal, method,
        // trace id) in one step, rather than a doubling for each.
        if object.capacity() - object.len() < ADD_MIN {
            object.reserve(ADD_ROOM);
        }
        let mut added = JsonObject::new(object, first);
        fields.record(&mut added);
        let result = added.result;
        object.push('}');
        result
    }
}

/// Below this much room left, a field added grows the object by [`ADD_ROOM`] at once.
const ADD_MIN: usize = 32;
const ADD_ROOM: usize = 192;

/// Bytes of a span's first fields written on the stack; more spill into a `String`.
const STAGED: usize = 256;

/// A writer that keeps what it is given on the stack while it fits.
struct Staged {
    bytes: [u8; STAGED],
    len: usize,
    spilled: String,
}

impl Default for Staged {
    fn default() -> Self {
        Staged {
            bytes: [0; STAGED],
            len: 0,
            spilled: String::new(),
        }
    }
}

impl Staged {
    fn as_str(&self) -> &str {
        if self.spilled.is_empty() {
            // Only whole `str`s are copied in: always UTF-8.
            std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
        } else {
            &self.spilled
        }
    }
}

impl Write for Staged {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.spilled.is_empty() && self.len + s.len() <= STAGED {
            self.bytes[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
            self.len += s.len();
        } else {
            if self.spilled.is_empty() {
                let staged = std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default();
                self.spilled.push_str(staged);
            }
            self.spilled.push_str(s);
        }
        Ok(())
    }
}

/// A visitor writing `"name":value` members, comma-separated, into `out`.
struct JsonObject<'a, W: Write> {
    out: &'a mut W,
    first: bool,
    result: fmt::Result,
}

impl<'a, W: Write> JsonObject<'a, W> {
    fn new(out: &'a mut W, first: bool) -> Self {
        JsonObject {
            out,
            first,
            result: Ok(()),
        }
    }

    /// Writes the member's name and colon; `None` for a field the log lines leave out.
    fn member(&mut self, field: &Field, value: impl FnOnce(&mut W) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        // What `JsonFields` does too: `log.*` fields are the log crate's metadata, and a raw
        // identifier's name is written without its `r#`.
        if name.starts_with("log.") {
            return;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        self.result = (|| {
            if !std::mem::take(&mut self.first) {
                self.out.write_char(',')?;
            }
            write_json_str(self.out, name)?;
            self.out.write_char(':')?;
            value(self.out)
        })();
    }
}

impl<W: Write> Visit for JsonObject<'_, W> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        // As serde_json writes an f64: a number when finite, else null.
        self.member(field, |out| {
            if value.is_finite() {
                write!(out, "{value:?}")
            } else {
                out.write_str("null")
            }
        });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.member(field, |out| write!(out, "{value}"));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.member(field, |out| write!(out, "{value}"));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.member(field, |out| write!(out, "{value}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.member(field, |out| write_json_str(out, value));
    }

    fn record_bytes(&mut self, field: &Field, value: &[u8]) {
        // As serde_json writes a byte slice: an array of numbers.
        self.member(field, |out| {
            out.write_char('[')?;
            for (i, byte) in value.iter().enumerate() {
                if i > 0 {
                    out.write_char(',')?;
                }
                write!(out, "{byte}")?;
            }
            out.write_char(']')
        });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.member(field, |out| {
            out.write_char('"')?;
            write!(Escaped(&mut *out), "{value:?}")?;
            out.write_char('"')
        });
    }
}

/// `value` as a JSON string, quotes included.
fn write_json_str<W: Write>(out: &mut W, value: &str) -> fmt::Result {
    out.write_char('"')?;
    Escaped(&mut *out).write_str(value)?;
    out.write_char('"')
}

/// Writes what it is given escaped for the inside of a JSON string (as serde_json escapes:
/// quote, backslash, and control characters).
struct Escaped<'a, W: Write>(&'a mut W);

impl<W: Write> Write for Escaped<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let bytes = s.as_bytes();
        let mut plain = 0;
        let mut i = 0;
        while i < bytes.len() {
            let byte = bytes[i];
            // One table lookup per byte: a request's fields are about 200 bytes, and a `match`
            // of each byte against every escape cost several times that.
            if !NEEDS_ESCAPE[usize::from(byte)] {
                i += 1;
                continue;
            }
            let escape = match byte {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0x08 => "\\b",
                0x0c => "\\f",
                _ => "",
            };
            // Only ASCII bytes are escaped: `plain..i` ends on a character boundary.
            self.0.write_str(&s[plain..i])?;
            if escape.is_empty() {
                write!(self.0, "\\u{byte:04x}")?;
            } else {
                self.0.write_str(escape)?;
            }
            i += 1;
            plain = i;
        }
        self.0.write_str(&s[plain..])
    }
}

/// The bytes a JSON string escapes: control characters, quote and backslash.
static NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use serde_json::{json, Value};
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// Collects what a subscriber writes.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    /// A request-like span: fields at creation, more recorded later (one of them twice), and
    /// values that need escaping.
    fn log_in_a_recorded_span() {
        let span = tracing::info_span!(
            "request",
            request_id = "r-1",
            http_method = %"POST",
            path = "/v1/a2a/agents/ag \"q\"\\x/rpc",
            count = 3u64,
            delta = -2i64,
            ratio = 0.5f64,
            nan = f64::NAN,
            ok = true,
            r#type = "raw",
            tenant = tracing::field::Empty,
            principal = tracing::field::Empty,
            rpc_method = tracing::field::Empty,
            bytes = tracing::field::Empty,
        );
        span.record("tenant", "t-1");
        span.record("principal", "p\u{1}\n\té\u{7f}");
        span.record("rpc_method", "GetTask");
        span.record("rpc_method", "SendMessage");
        span.record("bytes", tracing::field::debug(&[1u8, 2]));
        let _entered = span.enter();
        tracing::info!(answer = 42, "inside");
    }

    /// The `span` object of the one log line `log` writes through a JSON layer with `fields`.
    fn span_object<N>(fields: N) -> Value
    where
        N: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let lines = Lines::default();
        let layer = tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .fmt_fields(fields)
            .with_writer(lines.clone());
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, log_in_a_recorded_span);
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let mut written = text.lines();
        let line: Value = serde_json::from_str(written.next().expect("one line")).unwrap();
        assert!(written.next().is_none(), "{text}");
        assert_eq!(line["fields"]["message"], "inside");
        line["span"].clone()
    }

    #[test]
    fn log_lines_carry_the_same_span_object_as_with_the_json_formatter() {
        let ours = span_object(SpanFields);
        let theirs = span_object(tracing_subscriber::fmt::format::JsonFields::new());
        assert_eq!(ours, theirs);
        assert_eq!(
            ours,
            json!({
                "name": "request",
                "request_id": "r-1",
                "http_method": "POST",
                "path": "/v1/a2a/agents/ag \"q\"\\x/rpc",
                "count": 3,
                "delta": -2,
                "ratio": 0.5,
                "nan": null,
                "ok": true,
                "type": "raw",
                "tenant": "t-1",
                "principal": "p\u{1}\n\té\u{7f}",
                "rpc_method": "SendMessage",
                "bytes": "[1, 2]",
            })
        );
    }

    /// First fields longer than the stack holds come out whole, in order.
    #[test]
    fn staged_fields_spill_whole_past_the_stack() {
        let mut staged = Staged::default();
        let mut expected = String::new();
        for i in 0..60 {
            let piece = format!("é{i:03}-");
            staged.write_str(&piece).unwrap();
            expected.push_str(&piece);
            assert_eq!(staged.as_str(), expected);
        }
        assert!(expected.len() > STAGED);
    }

    #[test]
    fn control_characters_are_escaped_as_serde_json_escapes_them() {
        let all: String = (0u8..0x80).map(char::from).collect();
        let mut ours = String::new();
        write_json_str(&mut ours, &all).unwrap();
        assert_eq!(ours, serde_json::to_string(&all).unwrap());
    }
}
