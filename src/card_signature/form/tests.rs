use super::*;
use serde_json::json;

/// Golden vectors computed by the official a2a-sdk 1.2.2 (`tests/python/card_vectors.py`; an
/// integration test checks the file against the SDK itself).
const VECTORS: &str = include_str!("../../../tests/python/card_vectors.json");

fn vectors() -> Vec<Value> {
    serde_json::from_str::<Value>(VECTORS)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn the_signed_form_is_the_sdks_for_every_vector() {
    let vectors = vectors();
    assert!(vectors.len() >= 19, "{} vectors", vectors.len());
    for vector in vectors {
        let name = vector["name"].as_str().unwrap();
        let card: Value = serde_json::from_str(vector["card"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        match vector["canonical"].as_str() {
            Some(canonical) => {
                let ours = signed_bytes(&card).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(
                    String::from_utf8(ours).unwrap(),
                    canonical,
                    "{name}: signed form differs from the SDK's"
                );
                // The SDK's view of a card includes its signatures; ours leaves them out.
                let mut view = vector["view"].clone();
                view.as_object_mut().unwrap().remove("signatures");
                assert_eq!(
                    sdk_view(&card).unwrap(),
                    view,
                    "{name}: the card as the SDK holds it"
                );
            }
            None => assert!(
                signed_bytes(&card).is_err(),
                "{name}: the SDK cannot read this card ({}), so it has no signed form",
                vector["error"]
            ),
        }
    }
}

#[test]
fn a_card_spelling_a_field_twice_has_no_form() {
    for card in [
        json!({"name": "x", "iconUrl": "a", "icon_url": "b"}),
        json!({"name": "x", "defaultInputModes": ["a"], "default_input_modes": ["b"]}),
    ] {
        assert!(
            matches!(signed_bytes(&card), Err(FormError::TwoSpellings { .. })),
            "{card}"
        );
    }
}

#[test]
fn signatures_and_unknown_fields_are_outside_the_signed_form() {
    let plain = json!({"name": "a", "version": "1"});
    let decorated = json!({
        "name": "a", "version": "1", "signatures": [{"protected": "p", "signature": "s"}],
        "extra": {"anything": true},
    });
    assert_eq!(signed_bytes(&plain), signed_bytes(&decorated));
    assert_eq!(
        signed_bytes(&plain).unwrap(),
        br#"{"name":"a","version":"1"}"#.to_vec()
    );
    // One byte of content changes the form.
    let changed = json!({"name": "b", "version": "1"});
    assert_ne!(signed_bytes(&plain), signed_bytes(&changed));
}

#[test]
fn the_view_reads_again_to_the_same_form() {
    // A verified card is stored as its SDK view; verifying it again later must give the same
    // bytes.
    for vector in vectors() {
        if vector["canonical"].is_null() {
            continue;
        }
        let card: Value = serde_json::from_str(vector["card"].as_str().unwrap()).unwrap();
        let view = sdk_view(&card).unwrap();
        let stored: Value = serde_json::from_str(&view.to_string()).unwrap();
        assert_eq!(
            signed_bytes(&stored).unwrap(),
            signed_bytes(&card).unwrap(),
            "{}",
            vector["name"]
        );
    }
}

#[test]
fn deep_extension_params_are_refused_not_recursed() {
    let mut deep = json!("x");
    for _ in 0..(MAX_DEPTH + 5) {
        deep = json!({ "a": deep });
    }
    let card = json!({"name": "d", "capabilities": {"extensions": [{"uri": "u", "params": deep}]}});
    assert!(matches!(
        signed_bytes(&card),
        Err(FormError::Canonical(CanonicalError::TooDeep))
    ));
}
