-- Status timestamps are stamped by the database, whoever writes the state: dispatch,
-- observation, the change-feed follower, cancel or the reconciler. A writer cannot set or
-- forge it; it moves exactly when `state` changes.
ALTER TABLE a2a_tasks
    ADD COLUMN status_timestamp timestamptz NOT NULL DEFAULT clock_timestamp();

CREATE FUNCTION a2a_tasks_stamp_status() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.status_timestamp := clock_timestamp();
    ELSIF NEW.state IS DISTINCT FROM OLD.state THEN
        NEW.status_timestamp := clock_timestamp();
    ELSE
        NEW.status_timestamp := OLD.status_timestamp;
    END IF;
    NEW.updated_at := clock_timestamp();
    RETURN NEW;
END;
$$;

CREATE TRIGGER a2a_tasks_stamp_status
    BEFORE INSERT OR UPDATE ON a2a_tasks
    FOR EACH ROW EXECUTE FUNCTION a2a_tasks_stamp_status();

-- ListTasks order: (status_timestamp desc, task_id desc) within one principal and agent.
CREATE INDEX a2a_tasks_listing
    ON a2a_tasks (tenant_id, principal_id, agent_id, status_timestamp DESC, task_id DESC);
