"""The landing path: ``python -m bench.landing`` (the bot's own cost per landing against a naive script, and
the push-time hook), ``bench.landing.chain`` (where the time between dependent landings goes) and
``bench.landing.replay`` (a real-size replay of the queue's modes); ``realsize`` makes their real-size repository.
"""
