"""The whole system under a fleet of agents: ``python -m bench.fleet`` (landing throughput by mode, idle agents, the
seeds' coordination load, and ``--offered``: 1,000 agents offering multiples of the verifier's capacity, with
admission control off and on), ``bench.fleet.coordination`` (overlapping work, footprints off and on),
``bench.fleet.pooler`` (the seeds' replay through PgBouncer) and ``bench.fleet.window_model`` (the window's
policies in a model, with the real planner).
"""
