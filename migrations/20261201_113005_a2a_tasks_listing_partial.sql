-- The listing index (tenant, principal, agent, status_timestamp desc, task_id desc) shares its
-- first three columns with the message identity's unique index (tenant, principal, agent,
-- message_id). While the table's statistics lag (a freshly loaded table, autovacuum off or
-- behind), both look equally cheap for the lookup of a repeated messageId, and the planner
-- may take the listing index: every task of the principal read and filtered, per repeat.
--
-- The listing index becomes partial, on a predicate every row satisfies (the trigger always
-- stamps status_timestamp) and that only ListTasks' page and count queries state
-- (src/store/listing.rs, LISTING_PREDICATE). A partial index serves only statements that
-- imply its predicate, so the identity lookup can only be planned on the identity's index.
--
-- Built before the old one is dropped, so ListTasks always has an index; like the other index
-- migrations it runs in the migration's transaction and blocks writes while it builds.

CREATE INDEX a2a_tasks_listing_partial
    ON a2a_tasks (tenant_id, principal_id, agent_id, status_timestamp DESC, task_id DESC)
    WHERE status_timestamp > '-infinity'::timestamptz;
DROP INDEX a2a_tasks_listing;
ALTER INDEX a2a_tasks_listing_partial RENAME TO a2a_tasks_listing;
