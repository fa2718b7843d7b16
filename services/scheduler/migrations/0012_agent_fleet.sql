-- What an agent's heartbeats say about it beyond liveness (for operators'
-- fleet lists), and which agents are drained: a drained agent's claims
-- lease nothing. A drain may be recorded before the agent's first
-- heartbeat, so it has its own table rather than a column of agents.
ALTER TABLE agents
    ADD COLUMN slots     int    NOT NULL DEFAULT 0,
    ADD COLUMN version   text   NOT NULL DEFAULT '',
    ADD COLUMN isolation text   NOT NULL DEFAULT '',
    ADD COLUMN warnings  text[] NOT NULL DEFAULT '{}';

CREATE TABLE agent_drains (
    agent_id   text        PRIMARY KEY,
    drained_at timestamptz NOT NULL
);
