-- Signed landing statements (issue 44): every landing's in-toto statements in DSSE envelopes, signed with the
-- server's key before main moves and written with the intent, then kept with the landed rows in the transaction
-- that records the landing (the reconciler's too), and copied to the bare repository's refs/notes/mergebot.
ALTER TABLE landing_intents ADD COLUMN attestations jsonb;

CREATE TABLE attestations (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    repo         text NOT NULL REFERENCES repos (name),
    landed_id    bigint REFERENCES landed (id),
    kind         text NOT NULL CHECK (kind IN ('landing', 'test_result', 'reverify')),
    subject_sha  text NOT NULL CHECK (subject_sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    sequence     bigint CHECK (sequence > 0),
    keyid        text NOT NULL CHECK (keyid ~ '^[0-9a-f]{64}$'),
    envelope     jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    noted_at     timestamptz,
    CHECK ((kind = 'landing') = (sequence IS NOT NULL))
);
CREATE UNIQUE INDEX attestations_one_landing ON attestations (repo, subject_sha) WHERE kind = 'landing';
CREATE UNIQUE INDEX attestations_sequence ON attestations (repo, sequence) WHERE kind = 'landing';
CREATE INDEX attestations_landed ON attestations (landed_id);
CREATE INDEX attestations_unnoted ON attestations (repo, id) WHERE noted_at IS NULL;
