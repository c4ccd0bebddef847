//! Who is calling which agent: the authorised principal, the agent as Q knows it in the
//! principal's tenant, and the principal's current access to the agent's workspace.

use std::sync::Arc;

use crate::access::{AccessCache, Purpose};
use crate::auth::Principal;
use crate::error::{agent_lookup_failed, HttpError};
use crate::store::Owner;
use crate::upstream::contract::{Agent, WorkspaceAccess};

/// An authenticated, authorised caller of one agent.
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub agent: Agent,
    pub workspace: WorkspaceAccess,
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
    /// workspace access: HTTP 404 for an agent unknown in this tenant, 503 if Q cannot say.
    pub async fn resolve(
        &self,
        principal: Principal,
        agent_id: &str,
        purpose: Purpose,
    ) -> Result<Caller, HttpError> {
        let access = self
            .access
            .agent_access(
                &principal.tenant_id,
                agent_id,
                &principal.principal_id,
                purpose,
            )
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
        })
    }
}
