-- Reserved for another branch of issue 44 (the reconciler's audit). This placeholder only keeps the numbering
-- without gaps on the reverify branch: drop it when the real 0033 is merged.
SELECT 1;
