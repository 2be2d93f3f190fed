"""Bearer tokens and roles for the control plane.

Two roles: ``operator`` may do everything, ``viewer`` may only read (GET).
Tokens come from, in this order and merged: the `tokens` argument, the
``DURABLE_TOKENS`` environment variable (``"tok1:operator,tok2:viewer"``) and
a file (the `tokens_file` argument or ``DURABLE_TOKENS_FILE``; one
``token:role`` per line, ``#`` comments). Only SHA-256 digests are kept, and
a presented token is compared with every known digest by
`hmac.compare_digest`, so neither timing nor a repr, log line or traceback
reveals a token.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigurationError

ROLES = ("viewer", "operator")
_RANK = {"viewer": 1, "operator": 2}


def role_allows(role: str, required: str) -> bool:
    """Whether a token of `role` may use a route that requires `required`."""
    return _RANK.get(role, 0) >= _RANK[required]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class TokenSet:
    """Known tokens (as digests) and their roles."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._entries: list[tuple[bytes, str]] = []
        for token, role in tokens.items():
            if not isinstance(token, str) or not token.strip() or token != token.strip():
                raise ConfigurationError(
                    "a control-plane token must be a non-empty string without surrounding "
                    "whitespace"
                )
            if role not in ROLES:
                raise ConfigurationError(
                    f"unknown role {role!r} for a control-plane token; roles are "
                    f"{', '.join(ROLES)}"
                )
            self._entries.append((_digest(token), role))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        roles = ", ".join(sorted(role for _, role in self._entries))
        return f"TokenSet({len(self._entries)} tokens: {roles})"

    def session_fingerprint(self, presented: str, key: bytes) -> bytes | None:
        """For a known token: HMAC(key, its digest), what a web UI session keeps
        instead of the token (None for an unknown token). `role_of_fingerprint`
        maps it back, so a session ends as soon as its token is removed."""
        if self.role_of(presented) is None:
            return None
        return hmac.new(key, _digest(presented), hashlib.sha256).digest()

    def role_of_fingerprint(self, fingerprint: bytes, key: bytes) -> str | None:
        """The role of the token a session was opened with, or None once that
        token is no longer configured; the same work for every token."""
        found: str | None = None
        for known, role in self._entries:
            mine = hmac.new(key, known, hashlib.sha256).digest()
            if hmac.compare_digest(mine, fingerprint) and found is None:
                found = role
        return found

    def role_of(self, presented: str) -> str | None:
        """The role of a presented token, or None; the same work for every token."""
        digest = _digest(presented)
        found: str | None = None
        for known, role in self._entries:
            if hmac.compare_digest(digest, known) and found is None:
                found = role
        return found


def parse_token_list(text: str, where: str) -> dict[str, str]:
    """``"tok1:operator,tok2:viewer"`` (commas or newlines) as {token: role}."""
    tokens: dict[str, str] = {}
    for raw in text.replace("\n", ",").split(","):
        item = raw.strip()
        if not item or item.startswith("#"):
            continue
        token, sep, role = item.rpartition(":")
        if not sep or not token.strip():
            raise ConfigurationError(
                f"{where}: each entry must be TOKEN:ROLE (roles: {', '.join(ROLES)}); "
                "one entry has no ':ROLE'"
            )
        tokens[token.strip()] = role.strip()
    return tokens


def load_tokens(
    tokens: Mapping[str, str] | None = None,
    tokens_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> TokenSet:
    """Merge the three sources (argument, DURABLE_TOKENS, file) into one set."""
    env = os.environ if environ is None else environ
    merged: dict[str, str] = {}
    if tokens:
        merged.update(tokens)
    if env.get("DURABLE_TOKENS"):
        merged.update(parse_token_list(env["DURABLE_TOKENS"], "DURABLE_TOKENS"))
    path = tokens_file or env.get("DURABLE_TOKENS_FILE")
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the tokens file {str(path)!r}: {exc.strerror}"
            ) from exc
        lines = [line for line in text.splitlines() if not line.strip().startswith("#")]
        merged.update(parse_token_list("\n".join(lines), f"tokens file {str(path)!r}"))
    return TokenSet(merged)
