-- Which tenants still call the retired routes: one row per tenant, route and UTC day, so the
-- table stays small (tenants x 12 routes x days) however much traffic the routes get.
CREATE TABLE IF NOT EXISTS a2a_retired_route_hits (
    tenant_id  text        NOT NULL,
    route      text        NOT NULL,
    day        date        NOT NULL,
    hits       bigint      NOT NULL DEFAULT 0,
    last_seen  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, route, day)
);
