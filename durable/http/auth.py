"""Bearer tokens and roles for the control plane.

Three roles: ``viewer`` may only read (GET), ``operator`` may also start and
steer runs, ``admin`` may also use the namespace and system routes (as the
reference engine's admin role does).
Tokens come from, in this order and merged: the `tokens` argument, the
``DURABLE_TOKENS`` environment variable (``"tok1:operator,tok2:viewer"``) and
a file (the `tokens_file` argument or ``DURABLE_TOKENS_FILE``; one
``token:role`` per line, ``#`` comments). A role may be limited to
namespaces: ``operator@billing|shipping`` (a `Grant`); without ``@`` a token
acts in every namespace. Only SHA-256 digests are kept, and
a presented token is compared with every known digest by
`hmac.compare_digest`, so neither timing nor a repr, log line or traceback
reveals a token.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigurationError

ROLES = ("viewer", "operator", "admin")
_RANK = {"viewer": 1, "operator": 2, "admin": 3}


def role_allows(role: str, required: str) -> bool:
    """Whether a token of `role` may use a route that requires `required`."""
    return _RANK.get(role, 0) >= _RANK[required]


_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
# "token:role" or "token:role@ns1|ns2" (a token may itself hold ':' or '@')
_ENTRY = re.compile(r"^(?P<token>.+):(?P<role>[A-Za-z]+)(?:@(?P<namespaces>[^@]*))?$", re.S)


@dataclass(frozen=True)
class Grant:
    """What a token may do: its role, in these namespaces (None: every one)."""

    role: str
    namespaces: frozenset[str] | None = None

    def allows_namespace(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    @classmethod
    def parse(cls, spec: str, where: str = "a control-plane token") -> Grant:
        """``"operator"`` or ``"viewer@billing|shipping"``."""
        role, sep, listed = str(spec).partition("@")
        role = role.strip()
        if role not in ROLES:
            raise ConfigurationError(
                f"unknown role {role!r} for {where}; roles are {', '.join(ROLES)} "
                "(optionally limited to namespaces: 'operator@billing|shipping')"
            )
        if not sep:
            return cls(role)
        names = [n.strip() for n in listed.split("|") if n.strip()]
        bad = [n for n in names if not _NAMESPACE.match(n)]
        if not names or bad:
            raise ConfigurationError(
                f"{where}: after '@' give the namespaces the token may act in, separated by "
                f"'|' (e.g. 'operator@billing|shipping'); got {listed!r}"
            )
        return cls(role, frozenset(names))


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class TokenSet:
    """Known tokens (as digests) and their roles."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._entries: list[tuple[bytes, Grant]] = []
        for token, role in tokens.items():
            if not isinstance(token, str) or not token.strip() or token != token.strip():
                raise ConfigurationError(
                    "a control-plane token must be a non-empty string without surrounding "
                    "whitespace"
                )
            self._entries.append((_digest(token), Grant.parse(role)))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        roles = ", ".join(sorted(grant.role for _, grant in self._entries))
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
        grant = self.grant_of_fingerprint(fingerprint, key)
        return None if grant is None else grant.role

    def grant_of_fingerprint(self, fingerprint: bytes, key: bytes) -> Grant | None:
        """`role_of_fingerprint`, with the token's namespaces."""
        found: Grant | None = None
        for known, grant in self._entries:
            mine = hmac.new(key, known, hashlib.sha256).digest()
            if hmac.compare_digest(mine, fingerprint) and found is None:
                found = grant
        return found

    def role_of(self, presented: str) -> str | None:
        """The role of a presented token, or None; the same work for every token."""
        grant = self.grant_of(presented)
        return None if grant is None else grant.role

    def grant_of(self, presented: str) -> Grant | None:
        """`role_of`, with the token's namespaces."""
        digest = _digest(presented)
        found: Grant | None = None
        for known, grant in self._entries:
            if hmac.compare_digest(digest, known) and found is None:
                found = grant
        return found


def parse_token_list(text: str, where: str) -> dict[str, str]:
    """``"tok1:operator,tok2:viewer"`` (commas or newlines) as {token: role}."""
    tokens: dict[str, str] = {}
    for raw in text.replace("\n", ",").split(","):
        item = raw.strip()
        if not item or item.startswith("#"):
            continue
        match = _ENTRY.match(item)
        if match is None or not match["token"].strip():
            raise ConfigurationError(
                f"{where}: each entry must be TOKEN:ROLE or TOKEN:ROLE@NS1|NS2 (roles: "
                f"{', '.join(ROLES)}); one entry has no ':ROLE'"
            )
        role = match["role"] + (f"@{match['namespaces']}" if match["namespaces"] is not None
                                else "")
        Grant.parse(role, where)
        tokens[match["token"].strip()] = role
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
