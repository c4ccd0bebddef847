//! Who is calling which agent: the authorised principal, the agent as Q knows it in the
//! principal's tenant, and the principal's current access to the agent's workspace.

use std::sync::Arc;

use crate::access::{AccessCache, Purpose, Who};
use crate::auth::{Credential, Identified, Principal};
use crate::error::{agent_lookup_failed, HttpError};
use crate::store::Owner;
use crate::upstream::contract::{Agent, WorkspaceAccess};

/// Longest agent id a route accepts.
pub const MAX_AGENT_ID_BYTES: usize = 128;

/// Whether `id` can name an agent: 1 to [`MAX_AGENT_ID_BYTES`] of letters, digits and `-._~`,
/// and not a dot segment. Anything else is no agent of Q's: the route answers 404 before any
/// cache or call to Q, so a stranger's made-up ids cost nothing and are kept nowhere.
pub fn valid_agent_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_AGENT_ID_BYTES
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// An authenticated, authorised caller of one agent.
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub agent: Arc<Agent>,
    pub workspace: WorkspaceAccess,
    /// Known only from before Q went down (within the outage grace): content-free reads only.
    pub last_known: bool,
    /// The caller's token, for observations that check it again while they last.
    pub credential: Option<Credential>,
}

impl Caller {
    /// The key every task of this caller is stored under.
    pub fn owner(&self) -> Owner {
        Owner {
            tenant_id: self.principal.tenant_id.clone(),
            principal_id: self.principal.principal_id.clone(),
            agent_id: self.agent.id.clone(),
        }
    }

    /// Whose access to which agent, for the access cache.
    pub fn who(&self) -> Who<'_> {
        Who {
            tenant_id: &self.principal.tenant_id,
            agent_id: &self.agent.id,
            principal_id: &self.principal.principal_id,
            last_known: self.last_known,
        }
    }
}

/// Resolves agents through Q's agent API, via the access cache (`crate::access`).
#[derive(Clone)]
pub struct AgentAccess {
    access: Arc<AccessCache>,
}

impl AgentAccess {
    pub fn new(access: Arc<AccessCache>) -> Self {
        AgentAccess { access }
    }

    /// The agent as Q knows it in the principal's tenant, with the principal's current
    /// workspace access: HTTP 404 for an agent unknown in this tenant (or an id no agent can
    /// have), 503 if Q cannot say.
    pub async fn resolve(
        &self,
        identified: Identified,
        credential: Option<Credential>,
        agent_id: &str,
        purpose: Purpose,
    ) -> Result<Caller, HttpError> {
        if !valid_agent_id(agent_id) {
            return Err(HttpError::AgentNotFound);
        }
        let Identified {
            principal,
            last_known,
        } = identified;
        let who = Who {
            tenant_id: &principal.tenant_id,
            agent_id,
            principal_id: &principal.principal_id,
            last_known,
        };
        let access = self
            .access
            .agent_access(who, purpose)
            .await
            .map_err(|e| agent_lookup_failed(&e))?
            .ok_or(HttpError::AgentNotFound)?;
        if access.agent.tenant_id != principal.tenant_id {
            // Q must not return another tenant's agent; treat it as unknown if it does.
            return Err(HttpError::AgentNotFound);
        }
        Ok(Caller {
            principal,
            agent: access.agent,
            workspace: access.workspace_access,
            last_known,
            credential,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_ids_are_short_plain_path_segments() {
        for ok in [
            "ag-writer",
            "a",
            "ag_1.v2~x",
            &"a".repeat(MAX_AGENT_ID_BYTES),
        ] {
            assert!(valid_agent_id(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "ag writer",
            "ag/writer",
            "ag%2Fwriter",
            "ägent",
            &"a".repeat(MAX_AGENT_ID_BYTES + 1),
        ] {
            assert!(!valid_agent_id(bad), "{bad:?}");
        }
    }
}
