-- Identity outlives content (docs/operations.md, "Retention"): when retention removes a
-- terminal task, a compact tombstone keeps its message identity (tenant, principal, agent,
-- messageId: as a sha256), the content hash and the task's id, context, final state and its
-- time, so a repeat of that messageId answers the same task (content-free) and never starts a
-- second run. Tombstones are written first and the task is deleted only a while later
-- (src/store/retention.rs), so an admission always sees one or the other.

-- The message identity as the admission and retention compute it: each part length-prefixed,
-- so no choice of ids can make two identities hash alike.
CREATE OR REPLACE FUNCTION a2a_message_identity(tenant text, principal text, agent text,
                                                message text)
RETURNS bytea LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT sha256(convert_to(
        length(tenant) || ':' || tenant || length(principal) || ':' || principal ||
        length(agent) || ':' || agent || length(message) || ':' || message, 'UTF8'))
$$;

CREATE TABLE a2a_task_tombstones (
    identity         bytea       PRIMARY KEY,
    tenant_id        text        NOT NULL,
    task_id          uuid        NOT NULL,
    context_id       uuid        NOT NULL,
    content_sha256   bytea       NOT NULL,
    state            text        NOT NULL,
    status_timestamp timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);

-- A tenant's tombstones, for `tenant export` and `tenant delete` (keyset pages by identity).
CREATE INDEX a2a_task_tombstones_tenant ON a2a_task_tombstones (tenant_id, identity);
