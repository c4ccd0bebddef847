-- Retention of terminal tasks: the reconciler leader deletes tasks whose terminal state is
-- older than `retention.tasks_seconds`, a small batch at a time, oldest first. Terminal states
-- never change (every writer keeps them), so `status_timestamp` of a terminal task is the
-- moment it ended. This partial index holds terminal tasks only, in that order, so each batch
-- reads exactly the rows it deletes; tasks still running are not in it at all.
--
-- Every table that references a2a_tasks must do so ON DELETE CASCADE, with an index leading
-- with the referencing column (tests/it/migrations.rs checks the catalog): a task is deleted
-- whole, in one statement, never half.

CREATE INDEX IF NOT EXISTS a2a_tasks_terminal_by_status_timestamp
    ON a2a_tasks (status_timestamp)
    WHERE state IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED',
                    'TASK_STATE_REJECTED');
