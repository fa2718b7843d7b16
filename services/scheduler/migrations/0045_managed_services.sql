-- Managed services (sidecars kept alive by agents): the services row is the
-- inline projection of the service's events, written in the same
-- transaction (doc holds the whole state; the other columns are what
-- queries filter on).
CREATE TABLE managed_services (
    id         text        PRIMARY KEY,
    tenant_id  text        NOT NULL,
    name       text        NOT NULL,
    agent_id   text        NOT NULL DEFAULT '',
    deleted    boolean     NOT NULL DEFAULT false,
    version    bigint      NOT NULL,
    doc        json        NOT NULL
);
CREATE INDEX managed_services_tenant_idx ON managed_services (tenant_id, name) WHERE NOT deleted;

-- When each agent last reported each service: liveness, not events (a
-- steady service records none). lost is set once its instance was marked
-- unknown, and cleared by the agent's next report.
CREATE TABLE managed_service_reports (
    service_id text        NOT NULL,
    agent_id   text        NOT NULL,
    at         timestamptz NOT NULL,
    lost       boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (service_id, agent_id)
);
CREATE INDEX managed_service_reports_silent_idx ON managed_service_reports (at) WHERE NOT lost;
