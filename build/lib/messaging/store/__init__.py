"""The store: the one place that talks to Redis. Keys in ``keys``, Lua in ``lua/``."""
