-- Main's tests judge the candidate's code (issue 41): the paths a judging run takes from main (a repository rule,
-- ``repo set --tests``), whether the tamper signal on a candidate's diff refuses it or only names it, and what the
-- signal found on each candidate.
ALTER TABLE repos ADD COLUMN test_paths text[] NOT NULL DEFAULT '{test_*.py,*_test.py,tests/,test/,conftest.py}'
    CHECK (cardinality(test_paths) <= 100);
ALTER TABLE repos ADD COLUMN suspicious text NOT NULL DEFAULT 'flag' CHECK (suspicious IN ('flag', 'refuse'));
ALTER TABLE candidates ADD COLUMN suspicious jsonb;
