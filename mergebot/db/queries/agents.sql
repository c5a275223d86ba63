-- Agents, their tokens, groups and assignments (mergebot/db/agents.py).
-- Named queries under "-- name: NAME" headers, loaded with every file of this folder (mergebot.db.queries).

-- name: agent_create
INSERT INTO agents (name, role, token_hash)
VALUES (%(name)s, %(role)s, %(token_hash)s)
RETURNING id, name, role, created_at, revoked_at;

-- name: agent_by_token
SELECT id, name, role, token_hash
FROM agents
WHERE token_hash = %(token_hash)s AND revoked_at IS NULL;

-- name: agent_by_name
SELECT id, name, role, created_at, revoked_at FROM agents WHERE name = %(name)s;

-- name: agent_rotate_token
UPDATE agents SET token_hash = %(token_hash)s, revoked_at = NULL
WHERE name = %(name)s
RETURNING id, name, role, created_at, revoked_at;

-- name: agent_revoke
UPDATE agents SET revoked_at = now()
WHERE name = %(name)s AND revoked_at IS NULL
RETURNING id, name, role, created_at, revoked_at;

-- name: agent_list
SELECT a.id, a.name, a.role, a.created_at, a.revoked_at, g.group_name, g.group_role,
       (SELECT count(*) FROM subtasks s WHERE s.owner_id = a.id) AS holding
FROM agents a LEFT JOIN assignments g ON g.agent_id = a.id
ORDER BY a.id;

-- name: group_upsert
-- A NULL description leaves an existing one alone.
INSERT INTO groups (name, description) VALUES (%(name)s, coalesce(%(description)s, ''))
ON CONFLICT (name) DO UPDATE SET description = coalesce(%(description)s, groups.description)
RETURNING name, open, description, created_at;

-- name: group_set_open
UPDATE groups SET open = %(open)s WHERE name = %(name)s
RETURNING name, open, description, created_at;

-- name: group_list
SELECT g.name, g.open, g.description, g.created_at,
       (SELECT count(*) FROM assignments a WHERE a.group_name = g.name) AS members
FROM groups g ORDER BY g.name;

-- name: assignment_set
-- Moving an agent changes only where its next claim looks first; a claim in flight is untouched.
INSERT INTO assignments (agent_id, group_name, group_role, assigned_by)
VALUES (%(agent_id)s, %(group_name)s, %(group_role)s, %(assigned_by)s)
ON CONFLICT (agent_id) DO UPDATE
    SET group_name = EXCLUDED.group_name, group_role = EXCLUDED.group_role,
        assigned_by = EXCLUDED.assigned_by, assigned_at = now()
RETURNING agent_id, group_name, group_role, assigned_by, assigned_at;

-- name: assignment_list
SELECT a.agent_id, ag.name AS agent, a.group_name, a.group_role, a.assigned_at
FROM assignments a JOIN agents ag ON ag.id = a.agent_id
ORDER BY a.group_name, ag.name;
