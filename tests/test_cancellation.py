"""The conformance suite's cancellation tests (`durable.testing.conformance.cancellation`),
shipped so an outside driver can run them; here on every driver of
tests/conftest.py's matrix."""

from durable.testing.conformance.cancellation import *  # noqa: F403
