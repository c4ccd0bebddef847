-- One tenant's tasks in id order, for `q-a2a-gateway tenant export` and `tenant delete`: each
-- batch continues after the last id it saw (or deleted) and reads only that tenant's rows.
-- Registrations (at most a quota per tenant), delegations (primary key) and retired-route
-- counters (primary key) already lead with the tenant.

CREATE INDEX IF NOT EXISTS a2a_tasks_by_tenant ON a2a_tasks (tenant_id, task_id);
