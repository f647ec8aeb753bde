"""Benchmarks of govrag against baselines measured in the same run (``make bench``)."""
