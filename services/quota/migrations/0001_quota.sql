-- The quota service's inline projection: the current state of every
-- aggregate, written in the same transaction as its events and rebuildable
-- from them. doc is the domain state as JSON; the other columns are what
-- reads filter on.
CREATE TABLE tenants (
    id      text   PRIMARY KEY,
    version bigint NOT NULL,
    doc     jsonb  NOT NULL
);

CREATE TABLE clusters (
    name    text   PRIMARY KEY,
    version bigint NOT NULL,
    doc     jsonb  NOT NULL
);

CREATE TABLE quotas (
    id        text   PRIMARY KEY,
    tenant_id text   NOT NULL,
    name      text   NOT NULL,
    kind      text   NOT NULL,
    cluster   text   NOT NULL,
    level     int    NOT NULL,
    parent_id text   NOT NULL,
    root_id   text   NOT NULL,
    status    text   NOT NULL,
    version   bigint NOT NULL,
    doc       jsonb  NOT NULL
);
-- A name is unique among the tenant's quotas that are not deleted; this
-- also stops two concurrent productions of the same name.
CREATE UNIQUE INDEX quotas_open_name_idx ON quotas (tenant_id, name) WHERE status <> 'Deleted';
CREATE INDEX quotas_parent_idx ON quotas (parent_id);
CREATE INDEX quotas_pending_idx ON quotas (status) WHERE status IN ('Provisioning', 'Failed', 'Unsubscribing');

CREATE TABLE ray_clusters (
    tenant_id text   NOT NULL,
    cluster   text   NOT NULL,
    status    text   NOT NULL,
    version   bigint NOT NULL,
    doc       jsonb  NOT NULL,
    PRIMARY KEY (tenant_id, cluster)
);

CREATE TABLE work_groups (
    quota_id  text   PRIMARY KEY,
    tenant_id text   NOT NULL,
    status    text   NOT NULL,
    version   bigint NOT NULL,
    doc       jsonb  NOT NULL
);
CREATE INDEX work_groups_status_idx ON work_groups (status, tenant_id);
