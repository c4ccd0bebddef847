//! The authenticated per-agent AgentCard.
//!
//! One standard 1.0 card per Q agent: a single JSONRPC 1.0 interface at the agent's RPC URL,
//! bearer authentication, no OAuth issuance (credentials come from Q's own identity system),
//! streaming true, push notifications and the extended card false. Absolute URLs come only
//! from the configured public base URL.
//!
//! Signing: with card signing keys configured, every card carries a signature by the active
//! key over exactly what is served (`card_signature::signer`).
//!
//! Served once per content: the body and `ETag` depend only on Q's agent record, the public
//! base URL and the signing keys, and the last two are fixed for the life of the process. So
//! each agent's served body is kept ([`ServedCards`]) and reused while Q's record of the agent
//! (read under the freshness rule on every request, like the caller's access) is unchanged: a
//! renamed agent gets a new body at its next request, an unchanged one is neither rebuilt nor
//! signed again. What is kept is never what decides access: every request is authorised and
//! resolved first, and only then picks its body.
//!
//! Caching: a weak `ETag` (sha256 of the body; of a signed card, sha256 of the card without
//! signatures and of the signing key's id) with `If-None-Match`, and `Last-Modified` with `If-Modified-Since`. Q's agent record carries
//! no modification time, so the card's is the moment this process first served the agent's
//! current card content ([`ServedCards`]). It moves whenever the content does (an agent renamed
//! in Q, a new gateway version, a new signing key, also back to an earlier content), so a date a client copied from an older card does not match a newer one
//! served by the same process. A restart, or another replica, dates the same content later: one
//! full answer instead of a 304. What dates per process cannot see: a card that changed and
//! changed back while another replica served neither change. The ETag is exact, and decides
//! whenever a client sends `If-None-Match`.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, HttpAuthSecurityScheme,
    SecurityScheme,
};

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::a2a::caller::valid_agent_id;
use crate::a2a::ProfileRoutes;
use crate::access::Purpose;
use crate::auth::{Access, Identified};
use crate::error::HttpError;
use crate::upstream::contract::{Agent, WorkspaceAccess};

pub const SECURITY_SCHEME: &str = "bearer";

/// The agent's base path under the gateway.
pub fn agent_path(agent_id: &str) -> String {
    format!("/v1/a2a/agents/{agent_id}")
}

pub fn build(agent: &Agent, public_base: &str) -> AgentCard {
    let rpc_url = format!("{public_base}{}/rpc", agent_path(&agent.id));
    let mut interface = AgentInterface::new(rpc_url, "JSONRPC");
    interface.protocol_version = "1.0".into();
    AgentCard {
        name: agent.name.clone(),
        description: agent.description.clone(),
        version: agent.version.clone(),
        supported_interfaces: vec![interface],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: None,
            extended_agent_card: Some(false),
        },
        default_input_modes: vec!["text/plain".into()],
        default_output_modes: vec!["text/markdown".into()],
        skills: vec![AgentSkill {
            id: "answer".into(),
            name: agent.name.clone(),
            description: agent.description.clone(),
            tags: vec!["q".into(), "text".into()],
            examples: None,
            input_modes: Some(vec!["text/plain".into()]),
            output_modes: Some(vec!["text/markdown".into()]),
            security_requirements: None,
        }],
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_schemes: Some(HashMap::from([(
            SECURITY_SCHEME.to_string(),
            SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
                scheme: "Bearer".into(),
                description: Some(
                    "A Q credential with ai:answer plus a2a:read (discovery, reads) or a2a:delegate (send, cancel), issued by Q's authentication system".into(),
                ),
                bearer_format: None,
            }),
        )])),
        security_requirements: Some(vec![HashMap::from([(SECURITY_SCHEME.to_string(), Vec::new())])]),
        signatures: None,
    }
}

/// Each agent's card as this process serves it: the body and `ETag` made from Q's record of the
/// agent, and when this process first served that content (the card's `Last-Modified`).
#[derive(Debug, Default)]
pub struct ServedCards {
    seen: Mutex<HashMap<String, Served>>,
}

#[derive(Debug, Clone)]
struct Served {
    /// The record the body was made from: the body serves while Q's record is this one.
    agent: Agent,
    body: Bytes,
    dated: Arc<Dated>,
}

/// The validators of one card content, and its two headers made once (every answer carries
/// them; shared, they cost a request no allocation).
#[derive(Debug)]
struct Dated {
    etag: String,
    since: SystemTime,
    /// The content changed within the second its predecessor was dated: both carry the same
    /// whole-second date, so that date cannot tell them apart.
    ambiguous: bool,
    etag_header: HeaderValue,
    last_modified_header: HeaderValue,
}

/// Entries kept before the map starts over. Only agents a caller was authorised to read get an
/// entry; starting over only costs a card made again and dated later (a full answer instead of
/// a 304).
const MAX_SERVED_AGENTS: usize = 10_000;

impl ServedCards {
    /// The body and date of `agent`'s card as of `now`: the kept ones while Q's record of the
    /// agent is the one they were made from, otherwise `make`'s body and `ETag` (kept for the
    /// next request), dated anew unless the content is the same as before.
    fn serve(
        &self,
        agent: &Agent,
        now: SystemTime,
        make: impl FnOnce() -> Result<(Bytes, String), String>,
    ) -> Result<(Bytes, Arc<Dated>), String> {
        let lock = || self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kept) = lock().get(&agent.id) {
            if kept.agent == *agent {
                return Ok((kept.body.clone(), kept.dated.clone()));
            }
        }
        // Made outside the lock: two first requests may both make it, none waits on a signing.
        let (body, etag) = make()?;
        let mut seen = lock();
        let previous = seen.get(&agent.id).map(|kept| &kept.dated);
        let dated = date_after(previous, etag, now);
        if previous.is_none() && seen.len() >= MAX_SERVED_AGENTS {
            seen.clear();
        }
        seen.insert(
            agent.id.clone(),
            Served {
                agent: agent.clone(),
                body: body.clone(),
                dated: dated.clone(),
            },
        );
        Ok((body, dated))
    }
}

/// The date of content `etag` first served at `now`, after `previous`: unchanged content keeps
/// its date; new content gets `now` in whole seconds (HTTP dates have no fraction).
fn date_after(previous: Option<&Arc<Dated>>, etag: String, now: SystemTime) -> Arc<Dated> {
    if let Some(dated) = previous {
        if dated.etag == etag {
            return dated.clone();
        }
    }
    let since = UNIX_EPOCH
        + Duration::from_secs(now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs());
    let ambiguous = previous.is_some_and(|p| p.since >= since);
    Arc::new(Dated::new(etag, since, ambiguous))
}

impl Dated {
    fn new(etag: String, since: SystemTime, ambiguous: bool) -> Dated {
        Dated {
            etag_header: HeaderValue::from_str(&etag).expect("hex etag"),
            last_modified_header: HeaderValue::from_str(&httpdate::fmt_http_date(since))
                .expect("HTTP date"),
            etag,
            since,
            ambiguous,
        }
    }

    /// `If-Modified-Since` (RFC 9110 §13.1.3): unchanged when the card is not newer than the
    /// client's date. A date shared with the previous content never counts as unchanged.
    fn unchanged_since(&self, client_date: SystemTime) -> bool {
        self.since < client_date || (self.since == client_date && !self.ambiguous)
    }
}

/// `GET /v1/a2a/agents/{agent_id}/.well-known/agent-card.json`: the authorisation stage with
/// `ai:answer` + `a2a:read`, then 404 for an agent Q does not know in the caller's tenant, 403
/// without current workspace access. Weak ETag with `If-None-Match` → 304, like the SDK;
/// `Last-Modified` with `If-Modified-Since` → 304 when the request has no `If-None-Match`.
pub async fn serve(
    State(routes): State<Arc<ProfileRoutes>>,
    Path(agent_id): Path<String>,
    // The request itself, not `HeaderMap`: axum's `HeaderMap` extractor clones the headers.
    request: Request,
) -> Response {
    let (parts, _) = request.into_parts();
    answer(&routes, &agent_id, &parts.headers).await
}

/// The card's answer to a request with `headers` for agent `agent_id`: [`serve`] through the
/// router, or the gateway's hot path (`app::gateway`).
pub async fn answer(routes: &ProfileRoutes, agent_id: &str, headers: &HeaderMap) -> Response {
    let result = async {
        // An id no agent can have is unknown before anything is cached or asked of Q.
        if !valid_agent_id(agent_id) {
            return Err(HttpError::AgentNotFound);
        }
        let principal = routes
            .authorizer
            .authorize(headers, &Access::Read.required_scopes())
            .await?;
        let identified = Identified {
            principal,
            last_known: false,
        };
        // The card says who may use the agent: Q confirms the workspace access now (under the
        // freshness rule), never a last known answer.
        let caller = routes
            .agents
            .resolve(identified, None, agent_id, Purpose::Current)
            .await?;
        if caller.workspace != WorkspaceAccess::Granted {
            return Err(HttpError::WorkspaceAccessDenied);
        }
        Ok(caller.agent)
    }
    .await;
    let agent = match result {
        Ok(agent) => agent,
        Err(e) => return e.into_response(),
    };
    let made = routes.served_cards.serve(&agent, SystemTime::now(), || {
        let served = routes
            .card_signer
            .serve(&build(&agent, &routes.public_base))
            .map_err(|e| e.to_string())?;
        Ok((Bytes::from(served.body), served.etag))
    });
    let (body, dated) = match made {
        Ok(made) => made,
        Err(e) => {
            return HttpError::Internal {
                cause: format!("the agent card has no signed form: {e}"),
            }
            .into_response()
        }
    };
    routes.card_signer.count_served();
    let mut response = if not_modified(headers, &dated.etag, &dated) {
        let mut response = Response::new(axum::body::Body::empty());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        response
    } else {
        Response::new(axum::body::Body::from(body))
    };
    let answer = response.headers_mut();
    // Room for all of them at once (and the length and request id added on the way out),
    // instead of growing the map as they come.
    answer.reserve(8);
    answer.insert(header::ETAG, dated.etag_header.clone());
    answer.insert(header::LAST_MODIFIED, dated.last_modified_header.clone());
    // Per caller: the card is behind authentication.
    answer.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=60"),
    );
    answer.insert(header::VARY, HeaderValue::from_static("Authorization"));
    if response.status() == StatusCode::OK {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    response
}

/// RFC 9110 §13.2.2: `If-None-Match` decides when present; only without it does
/// `If-Modified-Since` count, and an unparsable date is ignored.
fn not_modified(headers: &HeaderMap, etag: &str, dated: &Dated) -> bool {
    let mut if_none_match = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .peekable();
    if if_none_match.peek().is_some() {
        return if_none_match.flat_map(|v| v.split(',')).any(|tag| {
            let tag = tag.trim();
            tag == "*" || tag.trim_start_matches("W/") == etag.trim_start_matches("W/")
        });
    }
    headers
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v.trim()).ok())
        .is_some_and(|client_date| dated.unchanged_since(client_date))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent record of tenant `t` in workspace `ws`.
    fn agent(id: &str, name: &str) -> Agent {
        Agent {
            id: id.into(),
            tenant_id: "t".into(),
            name: name.into(),
            description: "d".into(),
            version: "1.0.0".into(),
            workspace_id: "ws".into(),
        }
    }

    #[test]
    fn card_has_one_jsonrpc_interface_and_bearer_only() {
        let agent = agent("ag-1", "Writer");
        let v = serde_json::to_value(build(&agent, "https://q.example")).unwrap();
        assert_eq!(v["supportedInterfaces"].as_array().unwrap().len(), 1);
        assert_eq!(
            v["supportedInterfaces"][0]["url"],
            "https://q.example/v1/a2a/agents/ag-1/rpc"
        );
        assert_eq!(v["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
        assert_eq!(v["supportedInterfaces"][0]["protocolVersion"], "1.0");
        assert_eq!(v["capabilities"]["streaming"], true);
        assert_eq!(v["capabilities"]["pushNotifications"], false);
        assert_eq!(v["capabilities"]["extendedAgentCard"], false);
        assert_eq!(
            v["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
            "Bearer"
        );
        assert!(!v.to_string().contains("oauth2"));
        assert!(v["securityRequirements"][0]["schemes"]
            .get("bearer")
            .is_some());
        // Round-trips through the official type.
        let back: AgentCard = serde_json::from_value(v).unwrap();
        assert_eq!(back.name, "Writer");
    }

    /// The card is one of the official SDK's golden vectors (tests/python/card_vectors.py), so
    /// its signed form is pinned to what the SDK computes.
    #[test]
    fn the_card_is_among_the_sdk_vectors() {
        let vectors: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/python/card_vectors.json")).unwrap();
        let vector = vectors
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "gateway-card")
            .expect("a vector of the gateway's card");
        let agent = Agent {
            id: "ag-writer".into(),
            tenant_id: "t".into(),
            name: "Writer éè 😀".into(),
            description: "Writes \"Markdown\"\n\u{2028}".into(),
            version: "1.0.0".into(),
            workspace_id: "ws".into(),
        };
        let built = serde_json::to_value(build(&agent, "https://q.example")).unwrap();
        let card: serde_json::Value =
            serde_json::from_str(vector["card"].as_str().unwrap()).unwrap();
        assert_eq!(built, card, "the vector is the card the gateway builds");
        let signed = crate::card_signature::form::signed_bytes(&built).unwrap();
        assert_eq!(
            String::from_utf8(signed).unwrap(),
            vector["canonical"].as_str().unwrap()
        );
        // The bearer requirement names no scopes, so the SDK's cleaning leaves it out of the
        // signed form (docs/outbound.md).
        assert!(!vector["canonical"]
            .as_str()
            .unwrap()
            .contains("securityRequirements"));
    }

    fn at(secs: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(secs * 1000 + millis)
    }

    /// Serves `etag` as agent `id`'s card content at `now`: the agent's record differs with
    /// the content (its name is the ETag), as when Q renames the agent.
    fn date(cards: &ServedCards, id: &str, etag: &str, now: SystemTime) -> Arc<Dated> {
        let agent = agent(id, etag);
        let made = || Ok((Bytes::from(etag.to_string()), etag.to_string()));
        let (body, dated) = cards.serve(&agent, now, made).unwrap();
        assert_eq!(body, etag.as_bytes());
        dated
    }

    #[test]
    fn a_card_keeps_its_date_until_its_content_changes() {
        let cards = ServedCards::default();
        let first = date(&cards, "ag-1", "W/\"a\"", at(100, 400));
        assert_eq!(first.since, at(100, 0));
        assert_eq!(
            date(&cards, "ag-1", "W/\"a\"", at(500, 0)).since,
            at(100, 0)
        );
        assert_eq!(
            date(&cards, "ag-2", "W/\"b\"", at(500, 0)).since,
            at(500, 0)
        );
        // New content is dated when it is first served, so an older copy's date is older.
        let changed = date(&cards, "ag-1", "W/\"c\"", at(700, 900));
        assert_eq!(changed.since, at(700, 0));
        assert!(!changed.unchanged_since(first.since));
        assert!(changed.unchanged_since(at(700, 0)));
        assert!(changed.unchanged_since(at(800, 0)));
        // Back to the first content: dated anew, not with its old date.
        assert_eq!(
            date(&cards, "ag-1", "W/\"a\"", at(900, 0)).since,
            at(900, 0)
        );
    }

    #[test]
    fn content_changed_within_the_same_second_never_matches_that_second() {
        let cards = ServedCards::default();
        let old = date(&cards, "ag-1", "W/\"a\"", at(100, 100));
        let new = date(&cards, "ag-1", "W/\"b\"", at(100, 700));
        assert_eq!(new.since, old.since);
        assert!(
            !new.unchanged_since(old.since),
            "a copy of the old card must not be told it is current"
        );
        assert!(new.unchanged_since(at(101, 0)));
    }

    /// The kept body serves while Q's record is the one it was made from; a changed record
    /// makes the card again, and content that came out the same keeps its date.
    #[test]
    fn a_card_is_made_again_only_when_qs_record_of_the_agent_changes() {
        let cards = ServedCards::default();
        let mut agent = agent("ag-1", "Writer");
        let made = std::cell::Cell::new(0);
        let make = |etag: &'static str| {
            made.set(made.get() + 1);
            Ok((Bytes::from_static(b"card"), etag.to_string()))
        };
        cards.serve(&agent, at(100, 0), || make("W/\"a\"")).unwrap();
        let (_, kept) = cards.serve(&agent, at(200, 0), || make("W/\"x\"")).unwrap();
        assert_eq!((made.get(), kept.etag.as_str()), (1, "W/\"a\""));
        // Moved to another workspace: made again, the same content keeps its date.
        agent.workspace_id = "ws-2".into();
        let (_, same) = cards.serve(&agent, at(300, 0), || make("W/\"a\"")).unwrap();
        assert_eq!((made.get(), same.since), (2, at(100, 0)));
        // A failed making serves nothing and keeps nothing.
        agent.name = "Renamed".into();
        assert!(cards
            .serve(&agent, at(400, 0), || Err("no signed form".into()))
            .is_err());
        let (_, renamed) = cards.serve(&agent, at(500, 0), || make("W/\"r\"")).unwrap();
        assert_eq!((made.get(), renamed.since), (3, at(500, 0)));
    }

    #[test]
    fn if_none_match_decides_over_if_modified_since() {
        let dated = Dated::new("W/\"a\"".into(), at(100, 0), false);
        let headers = |pairs: &[(header::HeaderName, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(k.clone(), HeaderValue::from_str(v).unwrap());
            }
            h
        };
        let later = httpdate::fmt_http_date(at(200, 0));
        let earlier = httpdate::fmt_http_date(at(50, 0));
        assert!(not_modified(
            &headers(&[(header::IF_MODIFIED_SINCE, &later)]),
            "W/\"a\"",
            &dated
        ));
        assert!(!not_modified(
            &headers(&[(header::IF_MODIFIED_SINCE, &earlier)]),
            "W/\"a\"",
            &dated
        ));
        assert!(!not_modified(
            &headers(&[(header::IF_MODIFIED_SINCE, "yesterday")]),
            "W/\"a\"",
            &dated
        ));
        // A non-matching ETag wins over a date that would match.
        assert!(!not_modified(
            &headers(&[
                (header::IF_NONE_MATCH, "W/\"z\""),
                (header::IF_MODIFIED_SINCE, &later)
            ]),
            "W/\"a\"",
            &dated
        ));
        assert!(not_modified(
            &headers(&[
                (header::IF_NONE_MATCH, "\"a\""),
                (header::IF_MODIFIED_SINCE, &earlier)
            ]),
            "W/\"a\"",
            &dated
        ));
    }
}
