-- One create in flight per message identity, by the gateway itself (src/dispatch.rs): a task
-- whose run is not recorded carries the moment until which one request (or the reconciler
-- leader) holds the right to send its create. The admission insert takes it; recording Q's
-- answer (or a create that never left) releases it; anyone else who wants to resolve the
-- dispatch takes it only once it is released or expired, so a repeat of the messageId never
-- sends a second create while the first is in flight, and a replica that died mid-create is
-- taken over once its claim expires. NULL: nobody holds it. Adds a nullable column only (no
-- table rewrite), so it applies after later-dated migrations on an existing database too.

ALTER TABLE a2a_tasks ADD COLUMN IF NOT EXISTS dispatch_claimed_until timestamptz;
