-- Signed agent cards (docs/outbound.md, "Verifying discovered cards"): per registration, how
-- its remote's card signatures are treated, the public keys the tenant's admin trusts for them,
-- and the outcome of the last check. Applied after later-dated migrations on an existing
-- database too: it only adds columns, with constant defaults (no table rewrite).

ALTER TABLE a2a_remote_agents
    -- ignore: not checked; prefer: checked and reported; require: an unverified card is not
    -- stored and delegation is refused.
    ADD COLUMN IF NOT EXISTS card_trust text NOT NULL DEFAULT 'ignore',
    -- Public JWKs, each with its kid. Never private keys: the API refuses them.
    ADD COLUMN IF NOT EXISTS card_trusted_keys jsonb NOT NULL DEFAULT '[]'::jsonb,
    -- {"verified", "reason", "kid"?, "detail"?} of the last check; NULL: not checked under the
    -- current policy and keys.
    ADD COLUMN IF NOT EXISTS card_verification jsonb,
    ADD COLUMN IF NOT EXISTS card_checked_at timestamptz;

ALTER TABLE a2a_remote_agents
    ADD CONSTRAINT a2a_remote_agents_card_trust
        CHECK (card_trust IN ('ignore', 'prefer', 'require')),
    -- A policy that checks needs a key to check with.
    ADD CONSTRAINT a2a_remote_agents_card_trust_keys
        CHECK (card_trust = 'ignore' OR jsonb_array_length(card_trusted_keys) > 0);
