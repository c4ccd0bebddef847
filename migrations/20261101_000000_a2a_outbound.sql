-- Outbound: remote agent registrations (tenant-owned, credential sealed with AES-256-GCM and
-- bound to tenant, registration and endpoint origin) and delegations (the caller's taskId is
-- the stable outbound messageId; an ambiguous send is recorded, never replayed).

CREATE TABLE a2a_remote_agents (
    registration_id       text PRIMARY KEY,
    tenant_id             text NOT NULL,
    name                  text NOT NULL,
    endpoint              text NOT NULL,
    -- Sealed bearer credential: key id, 96-bit nonce, ciphertext with tag. Never plaintext.
    credential_key_id     text,
    credential_nonce      bytea,
    credential_ciphertext bytea,
    -- The remote's card as last discovered: untrusted metadata, never configuration.
    discovered_card       jsonb,
    discovered_at         timestamptz,
    created_by            text NOT NULL,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT a2a_remote_agents_credential_whole CHECK (
        (credential_key_id IS NULL) = (credential_ciphertext IS NULL)
        AND (credential_nonce IS NULL) = (credential_ciphertext IS NULL)
    )
);

CREATE INDEX a2a_remote_agents_by_tenant
    ON a2a_remote_agents (tenant_id, created_at, registration_id);

CREATE TABLE a2a_delegations (
    tenant_id       text NOT NULL,
    principal_id    text NOT NULL,
    -- The caller's stable id; sent as the outbound messageId.
    task_id         text NOT NULL,
    registration_id text NOT NULL,
    content_sha256  text NOT NULL,
    -- The contextId sent with the message; answers must carry it.
    context_id      text NOT NULL,
    -- sending: a send is in flight (or its process died): treated as unknown.
    -- answered: the remote answered and the answer was correlated.
    -- unknown: the send may have reached the remote; never sent again.
    -- not_sent: certainly never delivered; a repeat may send.
    -- refused: the remote refused definitively (HTTP 4xx or a JSON-RPC error).
    outcome         text NOT NULL CHECK (outcome IN ('sending', 'answered', 'unknown', 'not_sent', 'refused')),
    status          text NOT NULL,
    remote_task_id  text,
    result          jsonb,
    error           jsonb,
    send_attempts   integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, principal_id, task_id)
);
