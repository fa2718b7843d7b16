-- Whether the agent has ever sent SendHeartbeat. Only such an agent is
-- judged lost by its silence: it promised to report every few seconds.
-- An agent that speaks only the lease protocol (claim, start, renew,
-- progress, complete) has no heartbeat but its lease renewals, which may
-- come every renew_interval_sec (60 s by default), so its attempts end
-- when their leases run out, never for a silence shorter than that.
ALTER TABLE agents ADD COLUMN heartbeats boolean NOT NULL DEFAULT false;
-- Agents that reported slots or a version did so in a heartbeat.
UPDATE agents SET heartbeats = true WHERE slots > 0 OR version <> '';
