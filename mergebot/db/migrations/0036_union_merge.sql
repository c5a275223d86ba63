-- Conflicts the bot resolves itself, only as main says (issue 45): the repository's --union globs (files whose
-- conflicts the in-memory merge resolves by union, besides those main's .gitattributes mark merge=union), and on
-- each landed record the files its merge resolved so.
ALTER TABLE repos ADD COLUMN union_merge text[] NOT NULL DEFAULT '{}' CHECK (cardinality(union_merge) <= 100);
ALTER TABLE landed ADD COLUMN union_merged text[];
