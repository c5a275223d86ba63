-- Admission control that admits at the rate the queue clears (issue 45, mergebot.landing.intake.admission): a lane
-- that refuses still lets in one claim for each candidate that left its queue since it began refusing
-- (``admitted`` counts the claims so let in, reset when the lane flips), so a full lane's backlog stays level
-- instead of draining to the low mark and then admitting a flood. Each slot goes to the least-served agent waiting
-- for one: per agent, the claims admission let it make, and since when and until when it waits.
ALTER TABLE admission_lanes ADD COLUMN admitted bigint NOT NULL DEFAULT 0 CHECK (admitted >= 0);
CREATE TABLE admission_agents (
    agent_id      bigint PRIMARY KEY REFERENCES agents (id),
    claims        bigint NOT NULL DEFAULT 0 CHECK (claims >= 0),
    waiting_since timestamptz,
    waiting_until timestamptz
);
