-- The merge method per repository (issue 43): 'merge' (a merge commit per landing, the candidate's commits kept as
-- its second parent) or 'squash' (one commit per landing whose only parent is the previous main).
ALTER TABLE repos ADD COLUMN merge_method text NOT NULL DEFAULT 'merge' CHECK (merge_method IN ('merge', 'squash'));
