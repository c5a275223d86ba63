-- The speculation window's width when a run was queued (issue 22's charts draw it over time). The width lives in
-- the queue's memory (``landing/window.py``); each candidate run it queues records it. NULL for every other run.
ALTER TABLE verify_jobs ADD COLUMN window_width integer CHECK (window_width >= 1);
