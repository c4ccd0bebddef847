//! What the densest remote JSON within the outbound bounds costs once parsed, measured by a
//! counting allocator that records the peak of live bytes (a binary of its own, so nothing
//! else allocates beside it; one test, so the measurements run one after another).
//!
//! Each shape is built to pass its bound set ([`CARD`] or [`ANSWER`], `src/json_bounds.rs`)
//! while filling its byte cap (64 KiB for cards, 1 MiB for answers), then parsed by the
//! client's own steps (`outbound::client::decode`): the card to a `Value`; the answer to a
//! `JsonRpcResponse`, its buffer dropped, its result to the official `SendMessageResponse` and
//! `Task`. The peak counts the body buffer too, sized as the client sizes it, and a
//! reallocation as both blocks at once.
//!
//! The shapes spend every structural bound in each way that costs most per byte: objects of
//! one member (a B-tree node each) in an array or in chains as deep as allowed, in full or in
//! part, then map members (a B-tree entry and a key each; as the task's metadata, a hash map
//! entry, at its growth steps) or array elements, the bytes left as strings; and a task whose
//! history holds as many messages as the objects allow.
//!
//! Measured (the densest shape each, on x86_64 with serde_json 1 and a2a-lf 0.4.2): a card
//! takes 3.27× its byte cap (chains of single-member objects beside one wide object), an
//! answer 4.67× (single-member objects beside a task metadata of 15,000 keys, past a growth
//! step of its hash map). Asserted with a tenth or more to spare: card ≤ 3.6×, answer ≤ 5.25×,
//! both within the targets of 4× and 6×. For comparison, without the bounds 64 KiB of
//! `{"":0}` took 98.7× the card cap as a `Value`, and 1 MiB of it 205× the answer cap through
//! the official `SendMessageResponse` (which copies the task it reads).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use q_a2a_gateway::json_bounds::{self, JsonBounds, ANSWER, CARD};
use q_a2a_gateway::outbound::client::decode;

struct Peak;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, SeqCst) + bytes;
    PEAK.fetch_max(live, SeqCst);
}

// SAFETY: every call is passed on unchanged to the system allocator; the counters neither
// allocate nor touch the memory.
unsafe impl GlobalAlloc for Peak {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), SeqCst);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Counted as a move: both blocks live at once.
        grew(new_size);
        // SAFETY: the caller's contract, passed on.
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        LIVE.fetch_sub(layout.size(), SeqCst);
        moved
    }
}

#[global_allocator]
static GLOBAL: Peak = Peak;

const CARD_CAP: usize = 64 * 1024;
const ANSWER_CAP: usize = 1024 * 1024;

/// Asserted multiples of the byte cap: what was measured (3.27×, 4.67×), with a tenth or more
/// to spare.
const CARD_MULTIPLE: f64 = 3.6;
const ANSWER_MULTIPLE: f64 = 5.25;

/// The most live bytes while `parse` runs on a copy of `json` (the body buffer, allocated
/// inside the measurement at its exact length, as a declared Content-Length sizes it).
fn peak_of(json: &[u8], parse: impl FnOnce(Vec<u8>)) -> usize {
    let before = LIVE.load(SeqCst);
    PEAK.store(before, SeqCst);
    let mut body = Vec::with_capacity(json.len());
    body.extend_from_slice(json);
    parse(body);
    PEAK.load(SeqCst) - before
}

/// Joins `items` with commas between `open` and `close`.
fn list(open: &str, items: impl Iterator<Item = String>, close: &str) -> String {
    let items: Vec<String> = items.collect();
    format!("{open}{}{close}", items.join(","))
}

/// What a shape may still spend of a bound set.
#[derive(Clone, Copy)]
struct Budget {
    elements: usize,
    objects: usize,
    /// Containers that may still open below the dense object.
    depth: usize,
}

/// How a dense object spends the objects a bound set allows: each costs a B-tree node
/// (about 630 bytes) however few members it has.
#[derive(Clone, Copy, Debug)]
enum Objects {
    None,
    /// `[{"":0},{"":0},…]`: two elements each; one in `.1` of what is allowed.
    InArray(usize),
    /// `[{"":{"":…{"":0}}},…]` as deep as allowed: one element each; one in `.1` of what is
    /// allowed.
    Chains(usize),
}

/// How it spends the elements left.
#[derive(Clone, Copy, Debug)]
enum Elements {
    /// `[0,0,…]`: 32 bytes each.
    Array,
    /// One object of distinct keys: a B-tree entry and a key each.
    WideObject,
    /// Distinct keys in the dense object itself (a task's metadata: the typed map).
    OwnMembers,
}

/// The members (`"key":value`) of a dense object, spending `budget` as told.
fn dense_members(budget: &mut Budget, objects: Objects, elements: Elements) -> Vec<String> {
    let mut members = Vec::new();
    // One object kept for the wide one.
    let kept = usize::from(matches!(elements, Elements::WideObject));
    let spare = budget.objects.saturating_sub(kept);
    match objects {
        Objects::None => {}
        Objects::InArray(share) => {
            let spare = spare / share;
            let n = spare.min(budget.elements.saturating_sub(2) / 2);
            let items = (0..n).map(|_| r#"{"":0}"#.to_string());
            members.push(format!("\"o\":{}", list("[", items, "]")));
            budget.objects -= n;
            budget.elements -= 1 + 2 * n;
        }
        Objects::Chains(share) => {
            let spare = spare / share;
            // Below the array.
            let deepest = budget.depth - 1;
            let mut chains = Vec::new();
            let mut left = spare;
            while left > 0 && budget.elements > 2 {
                let n = left.min(deepest).min(budget.elements - 2);
                chains.push(format!("{}0{}", r#"{"":"#.repeat(n), "}".repeat(n)));
                left -= n;
                budget.objects -= n;
                budget.elements -= 1 + n;
            }
            members.push(format!("\"c\":{}", list("[", chains.into_iter(), "]")));
            budget.elements -= 1;
        }
    }
    let n = budget.elements.saturating_sub(1);
    match elements {
        Elements::WideObject if budget.objects > 0 => {
            let keys = (0..n).map(|i| format!("\"{i:x}\":0"));
            members.push(format!("\"w\":{}", list("{", keys, "}")));
            budget.objects -= 1;
            budget.elements -= 1 + n;
        }
        Elements::OwnMembers => {
            members.extend((0..n).map(|i| format!("\"{i:x}\":0")));
            budget.elements -= n;
        }
        _ => {
            members.push(format!(
                "\"a\":{}",
                list("[", (0..n).map(|_| "0".to_string()), "]")
            ));
            budget.elements -= 1 + n;
        }
    }
    members
}

/// Strings (as members) that fill what is left of `room` bytes, each within the string bound.
fn fill(budget: &mut Budget, bounds: &JsonBounds, mut room: usize) -> Vec<String> {
    let mut members = Vec::new();
    // `"sNN":"…",` costs under 16 bytes beside its text.
    while room > 16 && budget.elements > 0 {
        let n = (room - 16).min(bounds.string_bytes);
        members.push(format!("\"s{:x}\":\"{}\"", members.len(), "x".repeat(n)));
        budget.elements -= 1;
        room = room.saturating_sub(n + 16);
    }
    members
}

/// Where the dense object goes, and what the rest of the document spends.
struct Frame {
    /// The document with `{}` where the dense object goes.
    json: &'static str,
    elements: usize,
    objects: usize,
    /// Containers open around the dense object.
    depth: usize,
}

/// A card is the dense object itself.
const CARD_FRAME: Frame = Frame {
    json: "{}",
    elements: 0,
    objects: 0,
    depth: 0,
};

/// A SendMessage answer: the dense object is the task's metadata.
const SEND_FRAME: Frame = Frame {
    json: r#"{"jsonrpc":"2.0","id":"1","result":{"task":{"id":"t","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"},"metadata":{}}}}"#,
    elements: 9,
    objects: 4,
    depth: 3,
};

/// A GetTask answer: the dense object is the task's metadata.
const GET_FRAME: Frame = Frame {
    json: r#"{"jsonrpc":"2.0","id":"1","result":{"id":"t","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"},"metadata":{}}}"#,
    elements: 8,
    objects: 3,
    depth: 2,
};

/// `frame` with a dense object that spends every structural bound of `bounds` as told, then
/// fills the bytes left up to `cap` with strings.
fn dense(
    bounds: &JsonBounds,
    cap: usize,
    frame: &Frame,
    objects: Objects,
    elements: Elements,
) -> String {
    // Elements kept for the strings that fill the bytes left.
    let reserve = cap / bounds.string_bytes + 2;
    let mut budget = Budget {
        elements: bounds.elements - frame.elements - reserve,
        // The dense object itself.
        objects: bounds.objects - frame.objects - 1,
        depth: bounds.depth - frame.depth - 1,
    };
    let payload = dense_members(&mut budget, objects, elements);
    budget.elements += reserve;
    let used = frame.json.len() + payload.iter().map(|m| m.len() + 1).sum::<usize>() + 2;
    let strings = fill(&mut budget, bounds, cap.saturating_sub(used));
    let object = list("{", payload.into_iter().chain(strings), "}");
    let json = frame.json.replacen("{}", &object, 1);
    assert!(json.len() <= cap, "{} bytes over the cap {cap}", json.len());
    assert_eq!(json_bounds::check(json.as_bytes(), bounds), Ok(()));
    json
}

/// Every way a dense object spends its bounds.
fn shapes() -> Vec<(Objects, Elements)> {
    let mut all = Vec::new();
    let mut spent = vec![Objects::None];
    for share in [1, 2, 3, 4, 6, 8] {
        spent.extend([Objects::InArray(share), Objects::Chains(share)]);
    }
    for objects in spent {
        for elements in [Elements::Array, Elements::WideObject, Elements::OwnMembers] {
            all.push((objects, elements));
        }
    }
    all
}

/// A task answer to SendMessage whose history holds as many messages as the objects allow,
/// each with one text part, the last one's text filling the bytes left.
fn dense_history(cap: usize) -> String {
    // A message is two objects (itself and its part) and six elements (three members, its
    // part, the part's member, itself in the history); the frame four objects and nine
    // members, and the last message is the one with the long text.
    let n = ((ANSWER.objects - 6) / 2).min((ANSWER.elements - 15) / 6);
    let message = r#"{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"x"}]}"#;
    let mut history: Vec<String> = (0..n).map(|_| message.to_string()).collect();
    let head = r#"{"jsonrpc":"2.0","id":"1","result":{"task":{"id":"t","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"},"history":["#;
    let tail = "]}}}";
    let used = head.len() + tail.len() + history.iter().map(|m| m.len() + 1).sum::<usize>();
    let text = "x".repeat((cap - used - 80).min(ANSWER.string_bytes));
    history.push(format!(
        r#"{{"messageId":"m","role":"ROLE_AGENT","parts":[{{"text":"{text}"}}]}}"#
    ));
    let json = format!("{head}{}{tail}", history.join(","));
    assert!(json.len() <= cap);
    assert_eq!(json_bounds::check(json.as_bytes(), &ANSWER), Ok(()));
    json
}

/// Parses a body the gateway's way, then drops everything.
type Parse = fn(Vec<u8>);

fn parse_card(body: Vec<u8>) {
    let card = decode::card(&body).unwrap();
    drop(body);
    drop(card);
}

/// As the client does: the answer, the buffer dropped, the result as the official type.
fn parse_send_answer(body: Vec<u8>) {
    let answer = decode::rpc_answer("SendMessage", &body).unwrap();
    drop(body);
    let typed = decode::send_result(answer.result.unwrap()).unwrap();
    drop(typed);
}

fn parse_get_answer(body: Vec<u8>) {
    let answer = decode::rpc_answer("GetTask", &body).unwrap();
    drop(body);
    let typed = decode::task_result(answer.result.unwrap()).unwrap();
    drop(typed);
}

fn multiple(peak: usize, cap: usize) -> f64 {
    peak as f64 / cap as f64
}

/// The densest of `shapes` and one built as `frame` parsed by `parse`: the multiple of `cap`
/// and what it was.
fn worst(
    bounds: &JsonBounds,
    cap: usize,
    frames: &[(&str, &Frame, Parse)],
    extra: Option<(&str, String, Parse)>,
) -> (f64, String) {
    let mut worst = (0.0, String::new());
    let mut measure = |name: String, json: &str, parse: Parse| {
        let m = multiple(peak_of(json.as_bytes(), parse), cap);
        eprintln!("{name}: {} bytes, {m:.2}x the cap", json.len());
        if m > worst.0 {
            worst = (m, name);
        }
    };
    for (what, frame, parse) in frames {
        for (objects, elements) in shapes() {
            let json = dense(bounds, cap, frame, objects, elements);
            measure(format!("{what}, {objects:?} + {elements:?}"), &json, *parse);
        }
    }
    if let Some((name, json, parse)) = extra {
        measure(name.to_string(), &json, parse);
    }
    worst
}

#[test]
fn the_densest_json_within_the_bounds_stays_within_its_memory_multiple() {
    let card = worst(&CARD, CARD_CAP, &[("card", &CARD_FRAME, parse_card)], None);
    let answer = worst(
        &ANSWER,
        ANSWER_CAP,
        &[
            ("SendMessage answer", &SEND_FRAME, parse_send_answer),
            ("GetTask answer", &GET_FRAME, parse_get_answer),
        ],
        Some((
            "SendMessage answer, history of messages",
            dense_history(ANSWER_CAP),
            parse_send_answer,
        )),
    );
    eprintln!(
        "worst: card {:.2}x ({}), answer {:.2}x ({})",
        card.0, card.1, answer.0, answer.1
    );
    assert!(
        card.0 <= CARD_MULTIPLE,
        "card: {:.2}x the byte cap ({}), over {CARD_MULTIPLE}x",
        card.0,
        card.1
    );
    assert!(
        answer.0 <= ANSWER_MULTIPLE,
        "answer: {:.2}x the byte cap ({}), over {ANSWER_MULTIPLE}x",
        answer.0,
        answer.1
    );
}
