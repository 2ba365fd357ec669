"""Reproducible benchmarks of Courier, each figure beside a baseline from the same run.

``python -m bench`` (``--quick`` for a smoke run of seconds) starts its own
store, API and worker processes, runs the benchmark scenarios against Courier's
performance targets, prints a table and writes it as JSON to
``bench/results/<timestamp>.json``. A run where any sent message was not
delivered exactly once is void: it exits non-zero and prints no figures.
"""
