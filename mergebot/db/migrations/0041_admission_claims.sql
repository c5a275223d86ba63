-- Claims in flight (issue 45, rule 8 of mergebot.landing.intake.admission): the lane each claim admission let in
-- was made for (NULL: the claim named none, and could become work for any lane). A claim adds to a lane's backlog
-- only when its work is pushed, a think time later; counting the claims still out lets a lane that begins to admit
-- hold the work in flight level instead of letting in every agent asking at once. One row per subtask, its latest
-- admitted claim's lane; whether the claim is still out is read from the subtask itself.
CREATE TABLE admission_claims (
    subtask_id bigint PRIMARY KEY REFERENCES subtasks (id),
    repo       text REFERENCES repos (name)
);
