-- The candidates a run was started for (issue 45): a window's checkpoint covers its own slot and every unchecked
-- slot ahead of it since the previous checkpoint (a batch), but a run named only its own candidate, so the
-- verifier-seconds of a batch's run went to one agent and the others' looked free (at 100 agents, 10x: 138 of 439
-- candidates had no run naming them, and Jain's index of verifier-seconds read 0.80 while every agent landed four).
-- NULL: the run was started for its candidate alone (or for none).
ALTER TABLE verify_jobs ADD COLUMN covers bigint[];
