"""Engine behaviour on every driver and host loop: the conformance suite's engine
tests, shipped in `durable.testing.conformance.engine` so an outside driver can
run them; here on every driver of tests/conftest.py's matrix."""

from durable.testing.conformance.engine import *  # noqa: F403
