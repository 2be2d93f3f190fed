"""Unit tests of the store's domain programs against an in-memory SQLite."""
