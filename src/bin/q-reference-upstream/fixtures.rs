//! The fixtures file (`config/q-fixtures.json`): the tenants, principals, tokens, workspaces
//! and agents the reference upstream serves. Read once at start and never changed; runtime
//! changes (revocations, approval toggles) live in the mutable state.

use std::collections::HashSet;
use std::path::Path;

use anyhow::{bail, Context};
use serde::Deserialize;

use crate::contract::Agent;

/// Latency of an agent whose fixture does not say.
const DEFAULT_LATENCY_MS: u64 = 300;

/// `config/q-fixtures.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixtures {
    /// Required as `Authorization: Bearer <service_token>` on every `/internal/v1/*` route
    /// except health.
    pub service_token: String,
    #[serde(default)]
    pub tenants: Vec<TenantFixture>,
    #[serde(default)]
    pub principals: Vec<PrincipalFixture>,
    #[serde(default)]
    pub tokens: Vec<TokenFixture>,
    #[serde(default)]
    pub workspaces: Vec<WorkspaceFixture>,
    #[serde(default)]
    pub agents: Vec<AgentFixture>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantFixture {
    pub id: String,
    #[serde(default)]
    pub features: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalFixture {
    pub id: String,
    pub tenant: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenFixture {
    pub token: String,
    pub principal: String,
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub expired: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceFixture {
    pub id: String,
    pub tenant: String,
    #[serde(default)]
    pub members: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFixture {
    pub id: String,
    pub tenant: String,
    pub workspace: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_version")]
    pub version: String,
    #[serde(default = "default_latency")]
    pub latency_ms: u64,
    #[serde(default)]
    pub requires_approval: bool,
}

fn default_version() -> String {
    "1.0.0".to_owned()
}

fn default_latency() -> u64 {
    DEFAULT_LATENCY_MS
}

impl AgentFixture {
    pub fn to_agent(&self) -> Agent {
        Agent {
            id: self.id.clone(),
            tenant_id: self.tenant.clone(),
            name: self.name.clone(),
            description: self.description.clone(),
            version: self.version.clone(),
            workspace_id: self.workspace.clone(),
        }
    }
}

impl Fixtures {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let raw = std::fs::read_to_string(path)
            .with_context(|| format!("reading fixtures {}", path.display()))?;
        let fixtures: Fixtures = serde_json::from_str(&raw)
            .with_context(|| format!("parsing fixtures {}", path.display()))?;
        fixtures.validate()?;
        Ok(fixtures)
    }

    /// Referential integrity: every tenant, principal and workspace named exists.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.service_token.is_empty() {
            bail!("fixtures: service_token is empty");
        }
        let tenants: HashSet<&str> = self.tenants.iter().map(|t| t.id.as_str()).collect();
        let known_tenant = |kind: &str, id: &str, tenant: &str| -> anyhow::Result<()> {
            anyhow::ensure!(
                tenants.contains(tenant),
                "fixtures: {kind} {id} has unknown tenant {tenant}"
            );
            Ok(())
        };
        for p in &self.principals {
            known_tenant("principal", &p.id, &p.tenant)?;
        }
        for t in &self.tokens {
            if self.principal(&t.principal).is_none() {
                bail!("fixtures: a token names unknown principal {}", t.principal);
            }
        }
        for w in &self.workspaces {
            known_tenant("workspace", &w.id, &w.tenant)?;
            for m in &w.members {
                match self.principal(m) {
                    Some(p) if p.tenant == w.tenant => {}
                    Some(_) => bail!("fixtures: member {m} of {} is of another tenant", w.id),
                    None => bail!("fixtures: workspace {} names unknown principal {m}", w.id),
                }
            }
        }
        for a in &self.agents {
            known_tenant("agent", &a.id, &a.tenant)?;
            match self.workspace(&a.workspace) {
                Some(w) if w.tenant == a.tenant => {}
                Some(_) => bail!("fixtures: agent {} is in another tenant's workspace", a.id),
                None => bail!(
                    "fixtures: agent {} has unknown workspace {}",
                    a.id,
                    a.workspace
                ),
            }
        }
        Ok(())
    }

    pub fn tenant(&self, id: &str) -> Option<&TenantFixture> {
        self.tenants.iter().find(|t| t.id == id)
    }

    pub fn principal(&self, id: &str) -> Option<&PrincipalFixture> {
        self.principals.iter().find(|p| p.id == id)
    }

    pub fn token(&self, token: &str) -> Option<&TokenFixture> {
        self.tokens.iter().find(|t| t.token == token)
    }

    pub fn workspace(&self, id: &str) -> Option<&WorkspaceFixture> {
        self.workspaces.iter().find(|w| w.id == id)
    }

    pub fn agent(&self, id: &str) -> Option<&AgentFixture> {
        self.agents.iter().find(|a| a.id == id)
    }

    /// The agent if it exists *in this tenant*; another tenant's agent is indistinguishable
    /// from an unknown one.
    pub fn tenant_agent(&self, tenant_id: &str, agent_id: &str) -> Option<&AgentFixture> {
        self.agent(agent_id).filter(|a| a.tenant == tenant_id)
    }

    pub fn is_member(&self, workspace_id: &str, principal_id: &str) -> bool {
        self.workspace(workspace_id)
            .is_some_and(|w| w.members.iter().any(|m| m == principal_id))
    }
}
