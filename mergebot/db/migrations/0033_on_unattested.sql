-- The audit of main (issue 44): every commit of main's first-parent history since root_sha must have a landing
-- statement whose main-before is its first parent. on_unattested: what a commit without one does to the queue
-- ('flag': a finding on /healthz, the queue page and /metrics; 'pause': that and the queue paused until an admin
-- resumes). audited_head: main's head the audit last walked to (the next pass walks only what came after it);
-- unattested: the commits found without a statement that no admin has seen yet ({commits, count, head}).
ALTER TABLE repos ADD COLUMN on_unattested text NOT NULL DEFAULT 'flag' CHECK (on_unattested IN ('pause', 'flag'));
ALTER TABLE repos ADD COLUMN audited_head text CHECK (audited_head ~ '^[0-9a-f]{40}([0-9a-f]{24})?$');
ALTER TABLE repos ADD COLUMN unattested jsonb;
-- A repository that landed before its landings were signed: what it landed then is taken as audited (its history
-- has no statements to check), so the audit starts at main after its last landing.
UPDATE repos r SET audited_head = (SELECT l.main_sha FROM landed l WHERE l.repo = r.name ORDER BY l.id DESC LIMIT 1)
WHERE NOT EXISTS (SELECT 1 FROM attestations a WHERE a.repo = r.name);
