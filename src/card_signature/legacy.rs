//! The official Python SDK's reading of A2A 0.3 card fields (`parse_agent_card` in
//! `a2a/client/card_resolver.py`, a2a-sdk 1.2.2), step for step.
//!
//! The SDK verifies a card as it parsed it, and it parses a 0.3 card, or the hybrid card its
//! own server sends when an interface is 0.3, by first moving the 0.3 fields to their 1.0
//! places: `url`/`preferredTransport`/`protocolVersion`/`additionalInterfaces` become
//! `supportedInterfaces` (unless the card has them), `security` becomes
//! `securityRequirements`, `type`-style security schemes become oneof keys (apiKey's `in`
//! becomes `location`), a true `supportsAuthenticatedExtendedCard` becomes
//! `capabilities.extendedAgentCard`. Its signer only ever signs 1.0 cards, so a signature over
//! such a card covers what these steps make of it. Where the SDK's Python would raise (a
//! field of the wrong shape), the card has no signed form here either.

use serde_json::{json, Map, Value};

/// A card field of a shape the SDK's compatibility steps cannot read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    pub path: String,
    pub expected: String,
}

/// Applies the SDK's 0.3 compatibility steps to a card object, in the SDK's order.
pub fn upgrade(card: &mut Map<String, Value>) -> Result<(), Shape> {
    extended_card(card)?;
    connection_fields(card)?;
    security(card)?;
    Ok(())
}

/// Python's truthiness of a JSON value.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|v| v != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn shape(path: &str, expected: &str) -> Shape {
    Shape {
        path: path.to_string(),
        expected: expected.to_string(),
    }
}

fn extended_card(card: &mut Map<String, Value>) -> Result<(), Shape> {
    if !card
        .remove("supportsAuthenticatedExtendedCard")
        .is_some_and(|v| truthy(&v))
    {
        return Ok(());
    }
    let capabilities = card
        .entry("capabilities")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| shape("capabilities", "an object"))?;
    capabilities
        .entry("extendedAgentCard")
        .or_insert(Value::Bool(true));
    Ok(())
}

fn connection_fields(card: &mut Map<String, Value>) -> Result<(), Shape> {
    let main_url = card.remove("url");
    let transport = card
        .remove("preferredTransport")
        .unwrap_or_else(|| json!("JSONRPC"));
    let version = card
        .remove("protocolVersion")
        .unwrap_or_else(|| json!("0.3.0"));
    let additional = card.remove("additionalInterfaces");
    let Some(main_url) = main_url.filter(truthy) else {
        return Ok(());
    };
    if card.contains_key("supportedInterfaces") {
        return Ok(());
    }
    let mut interfaces = vec![json!({
        "url": main_url, "protocolBinding": transport, "protocolVersion": version,
    })];
    // `additionalInterfaces or []`: any falsy value means none.
    if let Some(additional) = additional.filter(truthy) {
        let list = additional
            .as_array()
            .ok_or_else(|| shape("additionalInterfaces", "an array"))?;
        for interface in list {
            let interface = interface
                .as_object()
                .ok_or_else(|| shape("additionalInterfaces[]", "an object"))?;
            interfaces.push(json!({
                "url": interface.get("url").cloned().unwrap_or(Value::Null),
                "protocolBinding": interface.get("transport").cloned().unwrap_or(Value::Null),
                "protocolVersion": version,
            }));
        }
    }
    card.insert("supportedInterfaces".into(), Value::Array(interfaces));
    Ok(())
}

/// `[{"scheme": ["scope"]}]` → `[{"schemes": {"scheme": {"list": ["scope"]}}}]`.
fn requirements(path: &str, legacy: &Value) -> Result<Value, Shape> {
    let list = legacy
        .as_array()
        .ok_or_else(|| shape(path, "an array of objects"))?;
    let mut mapped = Vec::with_capacity(list.len());
    for requirement in list {
        let requirement = requirement
            .as_object()
            .ok_or_else(|| shape(path, "an array of objects"))?;
        let schemes: Map<String, Value> = requirement
            .iter()
            .map(|(name, scopes)| (name.clone(), json!({ "list": scopes })))
            .collect();
        mapped.push(json!({ "schemes": schemes }));
    }
    Ok(Value::Array(mapped))
}

fn security(card: &mut Map<String, Value>) -> Result<(), Shape> {
    let legacy = card.remove("security");
    if let Some(legacy) = legacy.filter(|v| !v.is_null()) {
        if !card.contains_key("securityRequirements") {
            card.insert(
                "securityRequirements".into(),
                requirements("security", &legacy)?,
            );
        }
    }
    if let Some(skills) = card.get_mut("skills") {
        let skills = skills
            .as_array_mut()
            .ok_or_else(|| shape("skills", "an array"))?;
        for skill in skills {
            let skill = skill
                .as_object_mut()
                .ok_or_else(|| shape("skills[]", "an object"))?;
            if let Some(legacy) = skill.remove("security").filter(|v| !v.is_null()) {
                if !skill.contains_key("securityRequirements") {
                    let mapped = requirements("skills[].security", &legacy)?;
                    skill.insert("securityRequirements".into(), mapped);
                }
            }
        }
    }
    let Some(schemes) = card.get_mut("securitySchemes").filter(|v| truthy(v)) else {
        return Ok(());
    };
    let schemes = schemes
        .as_object_mut()
        .ok_or_else(|| shape("securitySchemes", "an object"))?;
    for scheme in schemes.values_mut() {
        let body = scheme
            .as_object_mut()
            .ok_or_else(|| shape("securitySchemes{}", "an object"))?;
        let kind = body.remove("type");
        let wrapper = match kind.as_ref().and_then(Value::as_str) {
            Some("apiKey") => "apiKeySecurityScheme",
            Some("http") => "httpAuthSecurityScheme",
            Some("oauth2") => "oauth2SecurityScheme",
            Some("openIdConnect") => "openIdConnectSecurityScheme",
            Some("mutualTLS") => "mtlsSecurityScheme",
            _ => continue,
        };
        if wrapper == "apiKeySecurityScheme" {
            if let Some(location) = body.remove("in") {
                body.insert("location".into(), location);
            }
        }
        let inner = std::mem::take(body);
        body.insert(wrapper.into(), Value::Object(inner));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upgraded(v: Value) -> Value {
        let mut map = v.as_object().unwrap().clone();
        upgrade(&mut map).unwrap();
        Value::Object(map)
    }

    #[test]
    fn a_0_3_card_moves_to_its_1_0_places() {
        let v = upgraded(json!({
            "url": "https://a.example/rpc", "preferredTransport": "JSONRPC",
            "additionalInterfaces": [{"url": "https://a.example/grpc", "transport": "GRPC"}],
            "security": [{"b": ["s"]}],
            "securitySchemes": {"k": {"type": "apiKey", "in": "header", "name": "X"}},
            "skills": [{"id": "s", "security": [{"b": []}]}],
            "supportsAuthenticatedExtendedCard": true,
        }));
        assert_eq!(
            v,
            json!({
                "supportedInterfaces": [
                    {"url": "https://a.example/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "0.3.0"},
                    {"url": "https://a.example/grpc", "protocolBinding": "GRPC", "protocolVersion": "0.3.0"},
                ],
                "securityRequirements": [{"schemes": {"b": {"list": ["s"]}}}],
                "securitySchemes": {"k": {"apiKeySecurityScheme": {"location": "header", "name": "X"}}},
                "skills": [{"id": "s", "securityRequirements": [{"schemes": {"b": {"list": []}}}]}],
                "capabilities": {"extendedAgentCard": true},
            })
        );
    }

    #[test]
    fn fields_of_1_0_win_and_legacy_ones_are_dropped() {
        let v = upgraded(json!({
            "url": "https://old.example", "protocolVersion": "0.3",
            "supportedInterfaces": [{"url": "https://new.example"}],
            "security": [{"b": []}], "securityRequirements": [],
        }));
        assert_eq!(
            v,
            json!({"supportedInterfaces": [{"url": "https://new.example"}], "securityRequirements": []})
        );
    }

    #[test]
    fn shapes_the_sdk_cannot_read_have_no_form() {
        for bad in [
            json!({"securitySchemes": {"b": null}}),
            json!({"skills": null}),
            json!({"security": {"b": []}}),
            json!({"supportsAuthenticatedExtendedCard": true, "capabilities": []}),
        ] {
            let mut map = bad.as_object().unwrap().clone();
            assert!(upgrade(&mut map).is_err(), "{bad}");
        }
    }
}
