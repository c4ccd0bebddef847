-- The verified final artifact of a completed task, committed once: reads of a completed task
-- answer from here and never ask Q again. A task's artifact goes with its task.
-- `text` is NULL when the output was verified but is larger than any answer may carry (the
-- result bound): such a task is refused (-32006) from here, without reading it from Q again.
CREATE TABLE IF NOT EXISTS a2a_task_artifacts (
    task_id      uuid PRIMARY KEY REFERENCES a2a_tasks (task_id) ON DELETE CASCADE,
    artifact_id  text        NOT NULL,
    name         text        NOT NULL,
    media_type   text        NOT NULL,
    text         text,
    sha256       text        NOT NULL,
    byte_count   bigint      NOT NULL CHECK (byte_count >= 0),
    committed_at timestamptz NOT NULL DEFAULT now()
);
