"""The intake room: what a push is checked against before it queues. A push is judged where git asks
(``prereceive``) by the pure rules of ``checks``; a push git took is assessed before its candidate is queued
(``assess``): the tamper signal names the lines of its non-test code that reach into the test machinery
(``tamper``, matching with ``tamper_rules`` on names resolved by ``tamper_resolve``), its failure estimate is
reckoned (``risk``), and the pusher is told who else touches the same files (``forecast``).
"""
