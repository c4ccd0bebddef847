-- Retention of outbound rows: the reconciler leader deletes delegations and clears discovered
-- cards unchanged for `outbound.retention_seconds`, a small batch at a time. These indexes let
-- each batch find the oldest rows without scanning the tables.

CREATE INDEX IF NOT EXISTS a2a_delegations_by_updated_at
    ON a2a_delegations (updated_at);

CREATE INDEX IF NOT EXISTS a2a_remote_agents_by_discovered_at
    ON a2a_remote_agents (discovered_at) WHERE discovered_at IS NOT NULL;
