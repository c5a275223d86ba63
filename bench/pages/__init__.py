"""Reads on the server: ``python -m bench.pages`` (the pages and the seeds' tree) and ``bench.pages.history``
(charts, timeline and metrics on a long history); ``rows`` writes the landing path's rows for a day.
"""
