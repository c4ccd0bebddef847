//! The signed form of an AgentCard: the exact bytes a card signature covers, derived the way
//! the official Python SDK (a2a-sdk 1.2.2, `a2a.utils.signing._canonicalize_agent_card`)
//! derives them, so that a card signed by either side verifies on the other.
//!
//! The SDK signs and verifies a protobuf `AgentCard`, never the JSON it received. So the
//! bytes are those of the card *as the SDK reads it*:
//!
//! 1. the 0.3 compatibility steps of its card parser ([`super::legacy`]);
//! 2. protobuf JSON parsing (`ParseDict`, unknown fields ignored): only A2A 1.0 AgentCard
//!    fields survive, under camelCase or proto names; a value of the wrong type has no form
//!    (the SDK refuses the whole card); `null` leaves a field unset;
//! 3. protobuf JSON printing (`MessageToDict`): camelCase names, a `false` bool without
//!    presence (`AgentExtension.required`, `pkceRequired`) left out while the capability bools
//!    keep theirs (and `""` likewise, but for `documentationUrl` and `iconUrl`), every number inside a `Struct` (`AgentExtension.params`) a double;
//! 4. `signatures` removed, then every empty string, empty list, empty object and `null` left
//!    out, recursively (`_clean_empty`);
//! 5. RFC 8785 ([`super::jcs`]).
//!
//! Step 4 means an empty value is outside the signature: a security requirement naming a
//! scheme with no scopes (`{"schemes": {"bearer": {"list": []}}}`) is not covered, nor is
//! anything outside the A2A 1.0 card (step 2). This is the SDK's rule, and interoperability
//! depends on sharing it. A card that spells one field both ways (`iconUrl` and `icon_url`)
//! has no form here: which of the two the SDK keeps depends on member order, which JSON does
//! not fix.

use serde_json::{Map, Number, Value};

use super::jcs::{self, CanonicalError, MAX_DEPTH};
use super::legacy;

/// A card without a signed form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormError {
    #[error("the card is not a JSON object")]
    NotAnObject,
    #[error("{path}: expected {expected}")]
    Shape { path: String, expected: String },
    #[error("{path}: more than one of {members}")]
    Oneof { path: String, members: String },
    #[error("{path}: the field is spelled both in camelCase and as its proto name")]
    TwoSpellings { path: String },
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

impl From<legacy::Shape> for FormError {
    fn from(shape: legacy::Shape) -> Self {
        FormError::Shape {
            path: shape.path,
            expected: shape.expected,
        }
    }
}

/// What a field holds, in protobuf terms.
enum Kind {
    Str,
    /// A proto3 `optional` string: printed whenever set, `""` included.
    OptStr,
    /// A bool without presence: `false` is its default and is not printed.
    Bool,
    /// A proto3 `optional` bool: printed whenever set, `false` included.
    OptBool,
    Msg(&'static Message),
    /// `google.protobuf.Struct`: any JSON object, its numbers doubles.
    Struct,
    RepeatedStr,
    RepeatedMsg(&'static Message),
    MapStr,
    MapMsg(&'static Message),
}

struct Field {
    json: &'static str,
    proto: &'static str,
    kind: Kind,
}

struct Message {
    name: &'static str,
    fields: &'static [Field],
    /// Members (JSON names) of a oneof: at most one may be set.
    oneof: &'static [&'static str],
}

const fn f(json: &'static str, proto: &'static str, kind: Kind) -> Field {
    Field { json, proto, kind }
}

const fn message(name: &'static str, fields: &'static [Field]) -> Message {
    Message {
        name,
        fields,
        oneof: &[],
    }
}

// The AgentCard of a2a-sdk 1.2.2 (`lf.a2a.v1`), read from its descriptors.
static AGENT_INTERFACE: Message = message(
    "AgentInterface",
    &[
        f("url", "url", Kind::Str),
        f("protocolBinding", "protocol_binding", Kind::Str),
        f("tenant", "tenant", Kind::Str),
        f("protocolVersion", "protocol_version", Kind::Str),
    ],
);
static AGENT_PROVIDER: Message = message(
    "AgentProvider",
    &[
        f("url", "url", Kind::Str),
        f("organization", "organization", Kind::Str),
    ],
);
static AGENT_EXTENSION: Message = message(
    "AgentExtension",
    &[
        f("uri", "uri", Kind::Str),
        f("description", "description", Kind::Str),
        f("required", "required", Kind::Bool),
        f("params", "params", Kind::Struct),
    ],
);
static AGENT_CAPABILITIES: Message = message(
    "AgentCapabilities",
    &[
        f("streaming", "streaming", Kind::OptBool),
        f("pushNotifications", "push_notifications", Kind::OptBool),
        f(
            "extensions",
            "extensions",
            Kind::RepeatedMsg(&AGENT_EXTENSION),
        ),
        f("extendedAgentCard", "extended_agent_card", Kind::OptBool),
    ],
);
static API_KEY_SCHEME: Message = message(
    "APIKeySecurityScheme",
    &[
        f("description", "description", Kind::Str),
        f("location", "location", Kind::Str),
        f("name", "name", Kind::Str),
    ],
);
static HTTP_AUTH_SCHEME: Message = message(
    "HTTPAuthSecurityScheme",
    &[
        f("description", "description", Kind::Str),
        f("scheme", "scheme", Kind::Str),
        f("bearerFormat", "bearer_format", Kind::Str),
    ],
);
static AUTHORIZATION_CODE_FLOW: Message = message(
    "AuthorizationCodeOAuthFlow",
    &[
        f("authorizationUrl", "authorization_url", Kind::Str),
        f("tokenUrl", "token_url", Kind::Str),
        f("refreshUrl", "refresh_url", Kind::Str),
        f("scopes", "scopes", Kind::MapStr),
        f("pkceRequired", "pkce_required", Kind::Bool),
    ],
);
static TOKEN_FLOW: Message = message(
    "ClientCredentialsOAuthFlow",
    &[
        f("tokenUrl", "token_url", Kind::Str),
        f("refreshUrl", "refresh_url", Kind::Str),
        f("scopes", "scopes", Kind::MapStr),
    ],
);
static IMPLICIT_FLOW: Message = message(
    "ImplicitOAuthFlow",
    &[
        f("authorizationUrl", "authorization_url", Kind::Str),
        f("refreshUrl", "refresh_url", Kind::Str),
        f("scopes", "scopes", Kind::MapStr),
    ],
);
static DEVICE_CODE_FLOW: Message = message(
    "DeviceCodeOAuthFlow",
    &[
        f(
            "deviceAuthorizationUrl",
            "device_authorization_url",
            Kind::Str,
        ),
        f("tokenUrl", "token_url", Kind::Str),
        f("refreshUrl", "refresh_url", Kind::Str),
        f("scopes", "scopes", Kind::MapStr),
    ],
);
static OAUTH_FLOWS: Message = Message {
    name: "OAuthFlows",
    fields: &[
        f(
            "authorizationCode",
            "authorization_code",
            Kind::Msg(&AUTHORIZATION_CODE_FLOW),
        ),
        f(
            "clientCredentials",
            "client_credentials",
            Kind::Msg(&TOKEN_FLOW),
        ),
        f("implicit", "implicit", Kind::Msg(&IMPLICIT_FLOW)),
        // PasswordOAuthFlow has ClientCredentialsOAuthFlow's fields.
        f("password", "password", Kind::Msg(&TOKEN_FLOW)),
        f("deviceCode", "device_code", Kind::Msg(&DEVICE_CODE_FLOW)),
    ],
    oneof: &[
        "authorizationCode",
        "clientCredentials",
        "implicit",
        "password",
        "deviceCode",
    ],
};
static OAUTH2_SCHEME: Message = message(
    "OAuth2SecurityScheme",
    &[
        f("description", "description", Kind::Str),
        f("flows", "flows", Kind::Msg(&OAUTH_FLOWS)),
        f("oauth2MetadataUrl", "oauth2_metadata_url", Kind::Str),
    ],
);
static OPEN_ID_CONNECT_SCHEME: Message = message(
    "OpenIdConnectSecurityScheme",
    &[
        f("description", "description", Kind::Str),
        f("openIdConnectUrl", "open_id_connect_url", Kind::Str),
    ],
);
static MTLS_SCHEME: Message = message(
    "MutualTlsSecurityScheme",
    &[f("description", "description", Kind::Str)],
);
static SECURITY_SCHEME: Message = Message {
    name: "SecurityScheme",
    fields: &[
        f(
            "apiKeySecurityScheme",
            "api_key_security_scheme",
            Kind::Msg(&API_KEY_SCHEME),
        ),
        f(
            "httpAuthSecurityScheme",
            "http_auth_security_scheme",
            Kind::Msg(&HTTP_AUTH_SCHEME),
        ),
        f(
            "oauth2SecurityScheme",
            "oauth2_security_scheme",
            Kind::Msg(&OAUTH2_SCHEME),
        ),
        f(
            "openIdConnectSecurityScheme",
            "open_id_connect_security_scheme",
            Kind::Msg(&OPEN_ID_CONNECT_SCHEME),
        ),
        f(
            "mtlsSecurityScheme",
            "mtls_security_scheme",
            Kind::Msg(&MTLS_SCHEME),
        ),
    ],
    oneof: &[
        "apiKeySecurityScheme",
        "httpAuthSecurityScheme",
        "oauth2SecurityScheme",
        "openIdConnectSecurityScheme",
        "mtlsSecurityScheme",
    ],
};
static STRING_LIST: Message = message("StringList", &[f("list", "list", Kind::RepeatedStr)]);
static SECURITY_REQUIREMENT: Message = message(
    "SecurityRequirement",
    &[f("schemes", "schemes", Kind::MapMsg(&STRING_LIST))],
);
static AGENT_SKILL: Message = message(
    "AgentSkill",
    &[
        f("id", "id", Kind::Str),
        f("name", "name", Kind::Str),
        f("description", "description", Kind::Str),
        f("tags", "tags", Kind::RepeatedStr),
        f("examples", "examples", Kind::RepeatedStr),
        f("inputModes", "input_modes", Kind::RepeatedStr),
        f("outputModes", "output_modes", Kind::RepeatedStr),
        f(
            "securityRequirements",
            "security_requirements",
            Kind::RepeatedMsg(&SECURITY_REQUIREMENT),
        ),
    ],
);
static AGENT_CARD: Message = message(
    "AgentCard",
    &[
        f("name", "name", Kind::Str),
        f("description", "description", Kind::Str),
        f(
            "supportedInterfaces",
            "supported_interfaces",
            Kind::RepeatedMsg(&AGENT_INTERFACE),
        ),
        f("provider", "provider", Kind::Msg(&AGENT_PROVIDER)),
        f("version", "version", Kind::Str),
        f("documentationUrl", "documentation_url", Kind::OptStr),
        f(
            "capabilities",
            "capabilities",
            Kind::Msg(&AGENT_CAPABILITIES),
        ),
        f(
            "securitySchemes",
            "security_schemes",
            Kind::MapMsg(&SECURITY_SCHEME),
        ),
        f(
            "securityRequirements",
            "security_requirements",
            Kind::RepeatedMsg(&SECURITY_REQUIREMENT),
        ),
        f(
            "defaultInputModes",
            "default_input_modes",
            Kind::RepeatedStr,
        ),
        f(
            "defaultOutputModes",
            "default_output_modes",
            Kind::RepeatedStr,
        ),
        f("skills", "skills", Kind::RepeatedMsg(&AGENT_SKILL)),
        // `signatures` is never part of the signed form, so it is not read here.
        f("iconUrl", "icon_url", Kind::OptStr),
    ],
);

/// The card as the official SDK holds it after parsing (steps 1 to 3): A2A 1.0 fields only,
/// protobuf JSON, without `signatures`. What a verified card is stored as.
pub fn sdk_view(card: &Value) -> Result<Value, FormError> {
    let mut card = card.as_object().ok_or(FormError::NotAnObject)?.clone();
    legacy::upgrade(&mut card)?;
    read_message(&AGENT_CARD, &card, "", 0).map(Value::Object)
}

/// The bytes a card signature covers (steps 1 to 5).
pub fn signed_bytes(card: &Value) -> Result<Vec<u8>, FormError> {
    let view = sdk_view(card)?;
    let cleaned = without_empty(&view, 0)?.unwrap_or_else(|| Value::Object(Map::new()));
    Ok(jcs::canonicalize(&cleaned)?)
}

fn shape(path: &str, expected: &str) -> FormError {
    FormError::Shape {
        path: path.to_string(),
        expected: expected.to_string(),
    }
}

fn deeper(depth: usize) -> Result<usize, FormError> {
    if depth >= MAX_DEPTH {
        return Err(CanonicalError::TooDeep.into());
    }
    Ok(depth + 1)
}

fn read_message(
    message: &Message,
    object: &Map<String, Value>,
    path: &str,
    depth: usize,
) -> Result<Map<String, Value>, FormError> {
    let depth = deeper(depth)?;
    let mut out = Map::new();
    let mut set_oneof: Vec<&str> = Vec::new();
    for field in message.fields {
        let camel = object.get(field.json);
        let proto = (field.proto != field.json)
            .then(|| object.get(field.proto))
            .flatten();
        let here = format!(
            "{path}{}{}",
            if path.is_empty() { "" } else { "." },
            field.json
        );
        let value = match (camel, proto) {
            (Some(_), Some(_)) => return Err(FormError::TwoSpellings { path: here }),
            (Some(v), None) | (None, Some(v)) => v,
            (None, None) => continue,
        };
        // `null` leaves a field unset, whatever its type.
        if value.is_null() {
            continue;
        }
        if message.oneof.contains(&field.json) {
            set_oneof.push(field.json);
        }
        if let Some(printed) = read_field(&field.kind, value, &here, depth)? {
            out.insert(field.json.to_string(), printed);
        }
    }
    if set_oneof.len() > 1 {
        return Err(FormError::Oneof {
            path: if path.is_empty() {
                message.name.to_string()
            } else {
                path.to_string()
            },
            members: set_oneof.join(", "),
        });
    }
    Ok(out)
}

/// A field's value as protobuf JSON prints it; `None` when it prints nothing (its default).
fn read_field(
    kind: &Kind,
    value: &Value,
    path: &str,
    depth: usize,
) -> Result<Option<Value>, FormError> {
    Ok(match kind {
        Kind::Str => {
            let s = value.as_str().ok_or_else(|| shape(path, "a string"))?;
            (!s.is_empty()).then(|| Value::String(s.to_string()))
        }
        Kind::OptStr => Some(Value::String(
            value
                .as_str()
                .ok_or_else(|| shape(path, "a string"))?
                .to_string(),
        )),
        Kind::Bool => {
            let b = value
                .as_bool()
                .ok_or_else(|| shape(path, "true or false"))?;
            b.then_some(Value::Bool(true))
        }
        Kind::OptBool => Some(Value::Bool(
            value
                .as_bool()
                .ok_or_else(|| shape(path, "true or false"))?,
        )),
        Kind::Msg(message) => {
            let object = value.as_object().ok_or_else(|| shape(path, "an object"))?;
            Some(Value::Object(read_message(message, object, path, depth)?))
        }
        Kind::Struct => {
            let object = value.as_object().ok_or_else(|| shape(path, "an object"))?;
            Some(struct_value(&Value::Object(object.clone()), depth)?)
        }
        Kind::RepeatedStr => {
            let items = value.as_array().ok_or_else(|| shape(path, "an array"))?;
            let strings = items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(|s| Value::String(s.to_string()))
                        .ok_or_else(|| shape(path, "an array of strings"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            (!strings.is_empty()).then_some(Value::Array(strings))
        }
        Kind::RepeatedMsg(message) => {
            let items = value.as_array().ok_or_else(|| shape(path, "an array"))?;
            let messages = items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let here = format!("{path}[{i}]");
                    let object = item.as_object().ok_or_else(|| shape(&here, "an object"))?;
                    read_message(message, object, &here, depth).map(Value::Object)
                })
                .collect::<Result<Vec<_>, _>>()?;
            (!messages.is_empty()).then_some(Value::Array(messages))
        }
        Kind::MapStr => {
            let object = value.as_object().ok_or_else(|| shape(path, "an object"))?;
            let mut out = Map::new();
            for (key, item) in object {
                let s = item
                    .as_str()
                    .ok_or_else(|| shape(&format!("{path}.{key}"), "a string"))?;
                out.insert(key.clone(), Value::String(s.to_string()));
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Kind::MapMsg(message) => {
            let object = value.as_object().ok_or_else(|| shape(path, "an object"))?;
            let mut out = Map::new();
            for (key, item) in object {
                let here = format!("{path}.{key}");
                let item = item.as_object().ok_or_else(|| shape(&here, "an object"))?;
                out.insert(
                    key.clone(),
                    Value::Object(read_message(message, item, &here, depth)?),
                );
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
    })
}

/// A `google.protobuf.Struct` value as protobuf JSON prints it: the same JSON, every number a
/// double.
fn struct_value(value: &Value, depth: usize) -> Result<Value, FormError> {
    let depth = deeper(depth)?;
    Ok(match value {
        Value::Number(n) => {
            let v = n
                .as_f64()
                .ok_or_else(|| CanonicalError::NotFinite(n.to_string()))?;
            Value::Number(
                Number::from_f64(v).ok_or_else(|| CanonicalError::NotFinite(n.to_string()))?,
            )
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| struct_value(item, depth))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| Ok((k.clone(), struct_value(v, depth)?)))
                .collect::<Result<_, FormError>>()?,
        ),
        other => other.clone(),
    })
}

/// The SDK's `_clean_empty`: drops empty strings, lists and objects and `null`, recursively;
/// `None` when nothing is left. `false` and `0` stay.
fn without_empty(value: &Value, depth: usize) -> Result<Option<Value>, FormError> {
    if depth > MAX_DEPTH {
        return Err(CanonicalError::TooDeep.into());
    }
    Ok(match value {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(items) => {
            let mut kept = Vec::new();
            for item in items {
                if let Some(item) = without_empty(item, depth + 1)? {
                    kept.push(item);
                }
            }
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        Value::Object(members) => {
            let mut kept = Map::new();
            for (key, item) in members {
                if let Some(item) = without_empty(item, depth + 1)? {
                    kept.insert(key.clone(), item);
                }
            }
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        other => Some(other.clone()),
    })
}

#[cfg(test)]
mod tests;
