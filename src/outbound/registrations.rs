//! `/v1/a2a/agents`: a tenant's registrations of remote A2A agents.
//!
//! A registration names the exact JSON-RPC endpoint and optionally a bearer credential. The
//! credential is write-only: accepted on create and update, sealed at once
//! ([`super::credential`]), never returned or logged. The management shape is Q's own, not an
//! AgentCard. Needs scope `a2a:agents` (or `a2a:*`); another tenant's registration is 404.
//!
//! Moving the endpoint to another origin without a new credential drops the stored one: it was
//! bound to the old origin and would not open for the new one anyway, and keeping it would
//! invite someone to re-point it.
//!
//! `deduplicatesMessageIds` is the operator's declaration that the remote deduplicates
//! messageIds (a Q gateway does); nothing else can establish it, least of all a card. Changing
//! the endpoint without restating it turns it off: it described the old endpoint.
//!
//! `cardTrust` (policy and trusted public keys) says whether the remote's card signatures are
//! checked and what an unverified card means ([`super::card_trust`]).
//!
//! The listing is paged (`pageSize` 1 to 100, default 50; an opaque signed `pageToken`,
//! [`crate::a2a::cursor`]) and shows summaries: a page reads no discovered card, whatever the
//! tenant holds; `GET /v1/a2a/agents/{agent_id}` shows a registration's card.

use crate::http::response_budget::charged_to;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};

use super::card_trust::{self, TrustBody};
use super::client::Target;
use super::credential::{BearerCredential, Binding};
use super::policy::origin;
use super::{invalid, read_json, OutboundRoutes, REGISTRATION_PREFIX};
use crate::auth::Principal;
use crate::error::{credential_not_stored, discovery_failed, HttpError};
use crate::store::outbound::{CardTrust, Registration, RegistrationSummary};

/// The management scope.
pub const MANAGE_SCOPES: &[&str] = &["a2a:agents"];
const MAX_NAME_CHARS: usize = 200;
const MAX_CREDENTIAL_BYTES: usize = 4096;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    bearer_token: Option<String>,
    /// Checked by hand, so a wrong type names this field rather than the body.
    #[serde(default, deserialize_with = "present_value")]
    deduplicates_message_ids: Option<Value>,
    #[serde(default)]
    card_trust: Option<TrustBody>,
}

/// Absent fields stay as they are; `"bearerToken": null` removes the credential.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct UpdateBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default, deserialize_with = "present")]
    bearer_token: Option<Option<String>>,
    #[serde(default, deserialize_with = "present_value")]
    deduplicates_message_ids: Option<Value>,
    #[serde(default)]
    card_trust: Option<TrustBody>,
}

/// Distinguishes `"field": null` (Some(None)) from an absent field (None).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// Any JSON a present field holds, `null` included (Some(Null)); None when absent.
fn present_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

fn check_deduplicates(value: &Value) -> Result<bool, HttpError> {
    value.as_bool().ok_or_else(|| {
        invalid(
            "deduplicatesMessageIds",
            "true or false: whether the remote deduplicates messageIds",
        )
    })
}

/// Registrations on a listing page unless `pageSize` says otherwise, and the most it may say.
const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 100;

/// The management view: never the credential, only whether there is one and its key id.
pub fn view(r: &Registration) -> Value {
    let mut v = summary_view(&r.summary());
    v["discoveredCard"] = json!(r.discovered_card);
    v
}

/// The listing's view of a registration: [`view`] without the discovered card.
fn summary_view(r: &RegistrationSummary) -> Value {
    json!({
        "id": r.id,
        "name": r.name,
        "endpoint": r.endpoint,
        "hasCredential": r.credential_key_id.is_some(),
        "credentialKeyId": r.credential_key_id,
        "discoveredAt": r.discovered_at,
        "deduplicatesMessageIds": r.deduplicates_message_ids,
        "cardTrust": card_trust::view(&r.card_trust),
        "createdAt": r.created_at,
        "updatedAt": r.updated_at,
    })
}

/// What a listing request asks for.
struct PageRequest {
    size: usize,
    /// `None` (or an empty token): the first page.
    token: Option<String>,
}

/// `pageSize` and `pageToken`, each at most once; any other parameter is refused, naming it.
fn page_request(query: Option<&str>) -> Result<PageRequest, HttpError> {
    let mut size = None;
    let mut token = None;
    for (name, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        let slot = match name.as_ref() {
            "pageSize" => &mut size,
            "pageToken" => &mut token,
            other => {
                return Err(invalid(
                    other,
                    "unknown parameter: the listing takes pageSize and pageToken",
                ))
            }
        };
        if slot.replace(value.into_owned()).is_some() {
            return Err(invalid(&name, "given more than once"));
        }
    }
    let size = match size {
        None => DEFAULT_PAGE_SIZE,
        Some(size) => size
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE_SIZE).contains(n))
            .ok_or_else(|| {
                invalid(
                    "pageSize",
                    format!("an integer from 1 to {MAX_PAGE_SIZE} (default {DEFAULT_PAGE_SIZE})"),
                )
            })?,
    };
    Ok(PageRequest {
        size,
        token: token.filter(|t| !t.is_empty()),
    })
}

fn check_name(name: &str) -> Result<String, HttpError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(invalid("name", "required"));
    }
    if name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
        return Err(invalid(
            "name",
            format!("at most {MAX_NAME_CHARS} characters, no control characters"),
        ));
    }
    Ok(name.to_string())
}

fn check_endpoint(state: &OutboundRoutes, endpoint: &str) -> Result<reqwest::Url, HttpError> {
    state
        .client
        .policy()
        .check_url(endpoint.trim())
        .map_err(|refusal| {
            tracing::info!(reason = refusal.reason, "registration endpoint refused");
            invalid("endpoint", format!("refused ({})", refusal.reason))
        })
}

fn check_credential(token: &str) -> Result<BearerCredential, HttpError> {
    let ok = !token.is_empty()
        && token.len() <= MAX_CREDENTIAL_BYTES
        && token.bytes().all(|b| b.is_ascii_graphic());
    if !ok {
        return Err(invalid(
            "bearerToken",
            format!("1 to {MAX_CREDENTIAL_BYTES} visible ASCII characters"),
        ));
    }
    Ok(BearerCredential::new(token.to_string()))
}

fn seal(
    state: &OutboundRoutes,
    credential: &BearerCredential,
    tenant_id: &str,
    registration_id: &str,
    endpoint: &reqwest::Url,
) -> Result<crate::store::outbound::SealedCredential, HttpError> {
    let origin = origin(endpoint);
    state
        .keys
        .seal(
            credential,
            Binding {
                tenant_id,
                registration_id,
                origin: &origin,
            },
        )
        .map_err(|e| credential_not_stored(&e))
}

/// The management authorisation, then the caller's tenant's registration `id`.
async fn owned(
    state: &OutboundRoutes,
    headers: &HeaderMap,
    id: &str,
) -> Result<(Principal, Registration), HttpError> {
    let principal = state.authorizer.authorize(headers, MANAGE_SCOPES).await?;
    if !id.starts_with(REGISTRATION_PREFIX) {
        return Err(HttpError::AgentNotFound);
    }
    let registration = state
        .store
        .registration(&principal.tenant_id, id)
        .await?
        .ok_or(HttpError::AgentNotFound)?;
    Ok((principal, registration))
}

pub async fn create(
    State(state): State<Arc<OutboundRoutes>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, HttpError> {
    let principal = state.authorizer.authorize(&headers, MANAGE_SCOPES).await?;
    let body: CreateBody = read_json(state.settings.max_body_bytes, &headers, body).await?;
    let name = check_name(body.name.as_deref().unwrap_or_default())?;
    let endpoint = match body.endpoint.as_deref() {
        Some(e) if !e.trim().is_empty() => check_endpoint(&state, e)?,
        _ => {
            return Err(invalid(
                "endpoint",
                "required: the exact JSON-RPC endpoint URL",
            ))
        }
    };
    let credential = body
        .bearer_token
        .as_deref()
        .map(check_credential)
        .transpose()?;
    let deduplicates_message_ids = body
        .deduplicates_message_ids
        .as_ref()
        .map(check_deduplicates)
        .transpose()?
        .unwrap_or(false);
    let mut trust = CardTrust::default();
    if let Some(body) = &body.card_trust {
        card_trust::apply(&mut trust, body)?;
    }
    let store = &state.store;
    let id = format!("{REGISTRATION_PREFIX}{}", uuid::Uuid::new_v4());
    let sealed = credential
        .as_ref()
        .map(|c| seal(&state, c, &principal.tenant_id, &id, &endpoint))
        .transpose()?;
    let now = Utc::now();
    let registration = Registration {
        id,
        tenant_id: principal.tenant_id.clone(),
        name,
        endpoint: endpoint.to_string(),
        credential: sealed,
        discovered_card: None,
        discovered_at: None,
        deduplicates_message_ids,
        card_trust: trust,
        created_by: principal.principal_id.clone(),
        created_at: now,
        updated_at: now,
    };
    let quota = state.settings.max_registrations;
    if !store
        .insert_registration_within(&registration, quota)
        .await?
    {
        return Err(HttpError::Conflict {
            code: "registration_quota_exceeded",
            message: format!(
                "this tenant already holds {quota} registrations, the most allowed; delete one first; nothing was created"
            ),
        });
    }
    tracing::info!(registration = %registration.id, "remote agent registered");
    Ok((StatusCode::CREATED, Json(view(&registration))).into_response())
}

/// `GET /v1/a2a/agents`: a page of the tenant's registrations, oldest first, and the token of
/// the next page (`""` after the last, as ListTasks answers).
pub async fn list(
    State(state): State<Arc<OutboundRoutes>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    let principal = state.authorizer.authorize(&headers, MANAGE_SCOPES).await?;
    let page = page_request(query.as_deref())?;
    let after = page
        .token
        .as_deref()
        .map(|token| {
            state
                .cursors
                .decode_registrations(token, &principal.tenant_id, &principal.principal_id)
        })
        .transpose()
        .map_err(|e| invalid("pageToken", e.to_string()))?;
    // One more than the page: whether there is a next one.
    let mut rows = state
        .store
        .registration_page(&principal.tenant_id, after.as_ref(), page.size as i64 + 1)
        .await?;
    let next_page_token = if rows.len() > page.size {
        rows.truncate(page.size);
        let last = rows.last().expect("a page holds at least one").position();
        state
            .cursors
            .encode_registrations(&principal.tenant_id, &principal.principal_id, &last)
    } else {
        String::new()
    };
    let agents: Vec<Value> = rows.iter().map(summary_view).collect();
    let page = Json(json!({ "agents": agents, "nextPageToken": next_page_token }));
    Ok(charged_to(
        page.into_response(),
        &principal.tenant_id,
        &principal.principal_id,
    ))
}

pub async fn get(
    State(state): State<Arc<OutboundRoutes>>,
    Path(agent_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    let (principal, registration) = owned(&state, &headers, &agent_id).await?;
    Ok(charged_to(
        Json(view(&registration)).into_response(),
        &principal.tenant_id,
        &principal.principal_id,
    ))
}

pub async fn update(
    State(state): State<Arc<OutboundRoutes>>,
    Path(agent_id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, HttpError> {
    let (principal, mut registration) = owned(&state, &headers, &agent_id).await?;
    let body: UpdateBody = read_json(state.settings.max_body_bytes, &headers, body).await?;
    if let Some(name) = &body.name {
        registration.name = check_name(name)?;
    }
    let deduplicates = body
        .deduplicates_message_ids
        .as_ref()
        .map(check_deduplicates)
        .transpose()?;
    if let Some(trust) = &body.card_trust {
        card_trust::apply(&mut registration.card_trust, trust)?;
    }
    let old_origin = reqwest::Url::parse(&registration.endpoint)
        .map(|u| origin(&u))
        .unwrap_or_default();
    let endpoint = match &body.endpoint {
        Some(e) => check_endpoint(&state, e)?,
        // Re-checked: the policy may have changed since the registration was made.
        None => reqwest::Url::parse(&registration.endpoint).map_err(|e| HttpError::Internal {
            cause: format!("stored endpoint does not parse: {e}"),
        })?,
    };
    let moved = registration.endpoint != endpoint.as_str();
    registration.endpoint = endpoint.to_string();
    match deduplicates {
        Some(declared) => registration.deduplicates_message_ids = declared,
        // The declaration described the old endpoint.
        None if moved => registration.deduplicates_message_ids = false,
        None => {}
    }
    match &body.bearer_token {
        Some(Some(token)) => {
            let credential = check_credential(token)?;
            registration.credential = Some(seal(
                &state,
                &credential,
                &principal.tenant_id,
                &registration.id,
                &endpoint,
            )?);
        }
        Some(None) => registration.credential = None,
        None => {
            if origin(&endpoint) != old_origin && registration.credential.is_some() {
                tracing::info!(
                    registration = %registration.id,
                    "endpoint moved to another origin: stored credential dropped"
                );
                registration.credential = None;
            }
        }
    }
    let updated = state
        .store
        .update_registration(&registration, |stored| {
            card_trust::recheck(&registration.card_trust, stored, &registration.endpoint)
        })
        .await?
        .ok_or(HttpError::AgentNotFound)?;
    Ok(Json(view(&updated)).into_response())
}

pub async fn delete(
    State(state): State<Arc<OutboundRoutes>>,
    Path(agent_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    let principal = state.authorizer.authorize(&headers, MANAGE_SCOPES).await?;
    if !agent_id.starts_with(REGISTRATION_PREFIX)
        || !state
            .store
            .delete_registration(&principal.tenant_id, &agent_id)
            .await?
    {
        return Err(HttpError::AgentNotFound);
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v1/a2a/agents/{agent_id}/discover`: fetches the remote's card through the outbound
/// policy, checks it under the registration's card trust and stores what that leaves
/// ([`card_trust::check`]). It is looked for under the agent's path (the endpoint without its
/// trailing `/rpc`) with the registration's credential, then at the origin's
/// `/.well-known/agent-card.json` without it (`client::card_urls`). Nothing in the card is
/// ever used as configuration: endpoint, credential, trusted keys and registration stay as
/// they are.
pub async fn discover(
    State(state): State<Arc<OutboundRoutes>>,
    Path(agent_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    let (principal, registration) = owned(&state, &headers, &agent_id).await?;
    let _permit = state.discovery_permit(&principal).await?;
    let credential = state
        .open_credential(&registration)
        .map_err(|e| discovery_failed(&e))?;
    let target = Target {
        endpoint: &registration.endpoint,
        credential: credential.as_ref().map(|(c, o)| (c, o.as_str())),
    };
    let card = state
        .client
        .fetch_card(&target)
        .await
        .map_err(|e| discovery_failed(&e))?;
    let checked = card_trust::check(&registration.card_trust, card, &registration.endpoint);
    if let Some(v) = &checked.verification {
        tracing::info!(
            registration = %registration.id,
            policy = registration.card_trust.policy.as_str(),
            verified = v.verified,
            reason = %v.reason,
            stored = checked.card.is_some(),
            "remote agent card discovered"
        );
    }
    let Some(updated) = state
        .store
        .record_discovered_card(&registration, &checked)
        .await?
    else {
        // Deleted, re-pointed or given another trust meanwhile: the card was fetched or checked
        // for something else.
        return Err(
            match state
                .store
                .registration(&principal.tenant_id, &registration.id)
                .await?
            {
                None => HttpError::AgentNotFound,
                Some(_) => HttpError::Conflict {
                    code: "registration_changed",
                    message: "the registration's endpoint or card trust changed during discovery; nothing was stored; discover again".into(),
                },
            },
        );
    };
    Ok(Json(view(&updated)).into_response())
}
