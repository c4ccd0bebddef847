-- The dispatch record (Q's run recorded on its task, `store::tasks::RECORD_DISPATCHED`) as a
-- HOT update: PostgreSQL writes an update's new row version on the same page and no index
-- entry when no column any index names (as a key or in its predicate) changes and the page
-- has room. The record sets `dispatch`, `run_id`, `deadline_at` and the claim; of those only
-- `dispatch` (the predicate of a2a_tasks_unresolved_dispatch) and `deadline_at` (the key of
-- a2a_tasks_open_deadline) were indexed.
--
-- `deadline_at`: the admission now writes the task's own execution deadline (admission plus
-- `execution_timeout_seconds`, the deadline its run is created with), and the dispatch record
-- keeps the earlier of it and Q's, which is the stored one unless Q's clock runs behind. Rows
-- admitted before keep NULL until their record, and the reconciler's deadline check already
-- falls back to admission plus timeout for them: nothing to backfill.
--
-- `dispatch`: the reconciler finds unresolved dispatches among the tasks still SUBMITTED
-- (every unresolved task that is not terminal is SUBMITTED: each writer that moves a task to
-- another live state records its run with it), through an index on that state instead. A task
-- leaves it with its first state change, an update that moves the listing index anyway.
--
-- Expand, then contract: the new index is built before the old one is dropped, so the
-- reconciler's query always has one; like the other index migrations it runs in the
-- migration's transaction and blocks writes while it builds (seconds per million tasks). A
-- replica of the release before runs its unresolved query without its own index until it is
-- replaced: one leader's query a second, over the table's SUBMITTED tasks.
CREATE INDEX IF NOT EXISTS a2a_tasks_submitted
    ON a2a_tasks (created_at) WHERE state = 'TASK_STATE_SUBMITTED';
DROP INDEX IF EXISTS a2a_tasks_unresolved_dispatch;

-- Room on each page for the row's next versions: new rows fill a page to 80 %. Applies to
-- pages written from now on (no rewrite, no lock beyond the statement's).
ALTER TABLE a2a_tasks SET (fillfactor = 80);
