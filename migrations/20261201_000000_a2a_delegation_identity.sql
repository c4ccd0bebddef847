-- Delegation identity at the remote, so that Q can delegate to Q.
--
-- 1. No client-chosen contextId is sent any more (A2A servers may assign contexts themselves,
--    and Q's own inbound profile refuses one). context_id now records the context the remote
--    put its task in, from the remote's answer; NULL until a task is received. Rows written
--    before hold the contextId that was sent, which the remote's answer had to match, so they
--    keep their meaning.
-- 2. The caller's taskId is the outbound messageId, and every principal of a tenant sends
--    with the registration's one credential, so at the remote two principals' equal taskIds
--    would be one message. A taskId is therefore unique per registration within the tenant,
--    whichever principal used it first.
-- 3. A remote that deduplicates messageIds (a Q gateway does) is declared by the operator on
--    the registration. Only for such a remote may a caller's repeat send the same messageId
--    again, and only to the same endpoint with the same sealed credential: target_sha256
--    fingerprints both at the time of the send (NULL for older rows: never sent again).

ALTER TABLE a2a_delegations ALTER COLUMN context_id DROP NOT NULL;
ALTER TABLE a2a_delegations ADD COLUMN target_sha256 text;
ALTER TABLE a2a_remote_agents
    ADD COLUMN deduplicates_message_ids boolean NOT NULL DEFAULT false;

-- Refuse, with a readable error and nothing changed, when principals already share a taskId
-- on one registration: those messages may have been merged at the remote, and only the
-- operator can tell which record to keep.
DO $$
DECLARE
    shared record;
BEGIN
    SELECT tenant_id, registration_id, task_id, count(*) AS n INTO shared
    FROM a2a_delegations
    GROUP BY tenant_id, registration_id, task_id
    HAVING count(*) > 1
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'a2a_delegations: several principals used taskId % on registration % of tenant % (% rows)',
            shared.task_id, shared.registration_id, shared.tenant_id, shared.n
            USING HINT = 'Keep one row per (tenant_id, registration_id, task_id) and delete the others, then run migrate again.';
    END IF;
END $$;

CREATE UNIQUE INDEX a2a_delegations_per_registration
    ON a2a_delegations (tenant_id, registration_id, task_id);
