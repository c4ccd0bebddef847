//! The authenticated per-agent AgentCard.
//!
//! One standard 1.0 card per Q agent: a single JSONRPC 1.0 interface at the agent's RPC URL,
//! bearer authentication, no OAuth issuance (credentials come from Q's own identity system),
//! streaming true, push notifications and the extended card false. Absolute URLs come only
//! from the configured public base URL.

use std::collections::HashMap;

use a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, HttpAuthSecurityScheme,
    SecurityScheme,
};

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::a2a::ProfileRoutes;
use crate::auth::Access;
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

/// `GET /v1/a2a/agents/{agent_id}/.well-known/agent-card.json`: the authorisation stage with
/// `ai:answer` + `a2a:read`, then 404 for an agent Q does not know in the caller's tenant, 403
/// without current workspace access. Weak ETag with `If-None-Match` → 304, like the SDK.
pub async fn serve(
    State(routes): State<Arc<ProfileRoutes>>,
    Path(agent_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        let principal = routes
            .authorizer
            .authorize(&headers, &Access::Read.required_scopes())
            .await?;
        let caller = routes.agents.resolve(principal, &agent_id).await?;
        if caller.workspace != WorkspaceAccess::Granted {
            return Err(HttpError::WorkspaceAccessDenied);
        }
        Ok(build(&caller.agent, &routes.public_base))
    }
    .await;
    let card = match result {
        Ok(card) => card,
        Err(e) => return e.into_response(),
    };
    let body = serde_json::to_vec(&card).expect("AgentCard serializes");
    let etag = format!("W/\"{}\"", hex::encode(Sha256::digest(&body)));
    let cache_headers = [
        (
            header::ETAG,
            HeaderValue::from_str(&etag).expect("hex etag"),
        ),
        // Per caller: the card is behind authentication.
        (
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, max-age=60"),
        ),
        (header::VARY, HeaderValue::from_static("Authorization")),
    ];
    let matches = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| {
            let tag = tag.trim();
            tag == "*" || tag.trim_start_matches("W/") == etag.trim_start_matches("W/")
        });
    if matches {
        return (StatusCode::NOT_MODIFIED, cache_headers).into_response();
    }
    (
        StatusCode::OK,
        cache_headers,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_has_one_jsonrpc_interface_and_bearer_only() {
        let agent = Agent {
            id: "ag-1".into(),
            tenant_id: "t".into(),
            name: "Writer".into(),
            description: "d".into(),
            version: "1.0.0".into(),
            workspace_id: "ws".into(),
        };
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
}
