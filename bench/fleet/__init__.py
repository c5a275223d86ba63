"""The whole system under a fleet of agents: ``python -m bench.fleet`` (landing throughput by mode, idle agents, the
seeds' coordination load), ``bench.fleet.coordination`` (overlapping work, footprints off and on),
``bench.fleet.pooler`` (the seeds' replay through PgBouncer) and ``bench.fleet.window_model`` (the window's
policies in a model, with the real planner).
"""
