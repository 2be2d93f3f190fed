"""Unit tests: one module of the package at a time, no worker, no network.

A package (with ``store/`` inside) so that files mirroring the package may
share a base name (``test_deadlines.py`` and ``store/test_deadlines.py``).
"""
