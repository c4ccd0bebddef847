-- Lifecycle: persisted cancellation and the position of Q's run change feed.

-- Set when a client cancels; from then on no dispatch path may create the task's run, and
-- the reconciler keeps notifying Q until the run is terminal.
ALTER TABLE a2a_tasks ADD COLUMN cancel_requested_at timestamptz;

CREATE INDEX a2a_tasks_pending_cancel ON a2a_tasks (cancel_requested_at)
    WHERE cancel_requested_at IS NOT NULL;

-- Dispatched tasks not yet terminal: the reconciler checks their execution deadline.
CREATE INDEX a2a_tasks_open_deadline ON a2a_tasks (deadline_at)
    WHERE state NOT IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED',
                        'TASK_STATE_REJECTED');

-- Where the change-feed follower resumes; one row, written only by the reconciler leader.
CREATE TABLE a2a_feed_position (
    id         int         PRIMARY KEY CHECK (id = 1),
    cursor     bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO a2a_feed_position (id, cursor) VALUES (1, 0);
