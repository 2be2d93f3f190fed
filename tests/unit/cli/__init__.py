"""Unit tests of the command line's wiring (durable/cli)."""
