-- The A2A identity of each task: one row per (tenant, principal, agent, messageId).
-- The row is committed before Q's run is created; `workflow_id` is the saved identity that
-- makes every later dispatch attempt land on the same run.
CREATE TABLE a2a_tasks (
    task_id        uuid        PRIMARY KEY,
    tenant_id      text        NOT NULL,
    principal_id   text        NOT NULL,
    agent_id       text        NOT NULL,
    message_id     text        NOT NULL,
    -- sha256 (hex) of the accepted message content; a repeat with other content is refused.
    content_sha256 text        NOT NULL,
    context_id     uuid        NOT NULL,
    workflow_id    text        NOT NULL UNIQUE,
    -- The accepted user message (role and text parts), as returned in task history.
    message        jsonb       NOT NULL,
    state          text        NOT NULL DEFAULT 'TASK_STATE_SUBMITTED',
    status_message text,
    -- pending: not yet known to have reached Q; dispatched: run id recorded;
    -- unknown: a create may have reached Q (never repeated blindly); refused: Q said no.
    dispatch       text        NOT NULL DEFAULT 'pending'
                   CHECK (dispatch IN ('pending', 'dispatched', 'unknown', 'refused')),
    dispatch_error text,
    run_id         text,
    deadline_at    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT a2a_tasks_message_identity UNIQUE (tenant_id, principal_id, agent_id, message_id),
    CONSTRAINT a2a_tasks_state_known CHECK (state IN (
        'TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING', 'TASK_STATE_COMPLETED',
        'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_INPUT_REQUIRED',
        'TASK_STATE_REJECTED', 'TASK_STATE_AUTH_REQUIRED'))
);

CREATE INDEX a2a_tasks_unresolved_dispatch ON a2a_tasks (created_at)
    WHERE dispatch IN ('pending', 'unknown');
