"""The conformance suite's timeout tests (`durable.testing.conformance.timeouts`),
shipped so an outside driver can run them; here on every driver of
tests/conftest.py's matrix."""

from durable.testing.conformance.timeouts import *  # noqa: F403
