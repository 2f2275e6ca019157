"""API keys per client, read from the file named by ``CARDSTREAM_GATEWAY__API_KEYS_FILE``.

The file has one ``client:key`` per line (blank lines and ``#`` comments ignored). A client name
is 1-32 characters of ``[a-z0-9-]`` starting with a letter or digit: it becomes the first part
of the client's upload ids (``{client}.{id}``), which is how any gateway instance knows whose an
upload is without asking anyone. A key is 16-256 printable ASCII characters without spaces or
``:``; a client may have several lines (rotation: add the new key, move the callers, remove the
old one). Only the keys' SHA-256 digests stay in memory: the keys are random tokens, so a fast
digest is enough (a slow password hash protects guessable passwords, which these are not), and
a request's key is looked up by its digest.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streams.gateway.errors import ApiKeysError
from streams.logs import log

CLIENT_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
KEY_PATTERN = re.compile(r"[!-9;-~]{16,256}")  # printable ASCII, no space, no ':'


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True)
class ParsedKeys:
    """A keys file's valid lines and what was wrong with the others.

    Attributes:
        keys: {sha256(key): client} of the valid lines.
        skipped: (line number, why) of each line that was skipped (never the key).
    """

    keys: dict[bytes, str]
    skipped: tuple[tuple[int, str], ...] = ()


def parse_keys(text: str) -> ParsedKeys:
    """``client:key`` lines -> their digests, skipping the lines that are not valid.

    A line is skipped (and named in :attr:`ParsedKeys.skipped` by its number, never its key)
    when it is not ``client:key``, has a bad client name or key, or gives a key already given
    to another client (the earlier line keeps it). A file without a valid line gives no keys:
    no client can call the gateway.
    """
    out: dict[bytes, str] = {}
    skipped: list[tuple[int, str]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        client, sep, key = line.partition(":")
        if not sep or not CLIENT_PATTERN.fullmatch(client):
            skipped.append((n, "expected 'client:key' with a client name of [a-z0-9-] "
                               "(1-32 characters)"))
            continue
        if not KEY_PATTERN.fullmatch(key):
            skipped.append((n, f"the key of {client} must be 16-256 printable ASCII "
                               "characters without spaces or ':'"))
            continue
        d = _digest(key)
        if out.get(d, client) != client:
            skipped.append((n, f"this key is also given to {out[d]}"))
            continue
        out[d] = client
    return ParsedKeys(out, tuple(skipped))


class ApiKeys:
    """The clients' keys, reloaded when the file changes (a Secret update in Kubernetes).

    Fails closed: every load applies what the file says now. Its valid lines are the keys;
    a malformed line is skipped and logged (``gateway_keys_line_skipped``, with its line number,
    never the key); a file without a valid line, or one that cannot be read any more, leaves
    no keys (every request is 401) until it is mended. A revoked key never outlives the
    reload that follows its removal, whatever else the file holds.

    Args:
        path: the keys file.
        reload_s: least seconds between two checks of the file (its modification time, size
            and inode).
        clock: monotonic seconds (tests pass their own).

    Attributes:
        error: what is wrong with the file now (skipped lines, no valid line, unreadable),
            None when nothing is; ``/ready`` reports it.

    Raises:
        ApiKeysError: at construction, the file cannot be read or has no valid line (the
            gateway does not start without a client).
    """

    def __init__(self, path: Path, reload_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.reload_s = reload_s
        self._clock = clock
        self._lock = threading.Lock()
        self.error: str | None
        self._keys: dict[bytes, str]
        self._names: frozenset[str]
        self._stamp = self._load()
        if not self._keys:
            raise ApiKeysError(str(self.error))
        self._checked = self._clock()

    def _stamp_of(self) -> tuple[int, int, int]:
        st = os.stat(self.path)
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _load(self) -> tuple[int, int, int] | None:
        """Read the file and apply what it says now (the keys of its valid lines, or none).

        Returns:
            The file's (mtime, size, inode) as read, None when it could not be read.
        """
        try:
            stamp = self._stamp_of()
            parsed = parse_keys(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as e:
            parsed, stamp = ParsedKeys({}), None
            problems = [f"cannot read the API keys file {self.path}: "
                        f"{getattr(e, 'strerror', None) or type(e).__name__}"]
        else:
            problems = [f"line {n}: {why}" for n, why in parsed.skipped]
            for n, why in parsed.skipped:
                log.error("gateway_keys_line_skipped", line=n, reason=why)
            if not parsed.keys:
                problems.append("no valid 'client:key' line: every request is refused")
        self._keys = parsed.keys
        self._names = frozenset(parsed.keys.values())
        self.error = "; ".join(problems) or None
        if self.error:
            log.error("gateway_keys_problem", clients=len(self._names), error=self.error)
        return stamp

    @property
    def clients(self) -> list[str]:
        """The client names (sorted)."""
        return sorted(self._names)

    def known(self, client: str) -> bool:
        """True when ``client`` has a key now."""
        return client in self._names

    def _maybe_reload(self) -> None:
        now = self._clock()
        if now - self._checked < self.reload_s:
            return
        with self._lock:
            self._checked = now
            try:
                if self._stamp_of() == self._stamp:
                    return
            except OSError:
                pass  # gone or unreadable: _load says so and leaves no keys
            self._stamp = self._load()
            log.info("gateway_keys_reloaded", clients=len(self._names))

    def client_of(self, authorization: str | None) -> str | None:
        """The client whose key is in ``authorization`` (``Bearer <key>``), or None.

        The presented key is looked up by its SHA-256 digest: how long the lookup takes
        depends on the digest, which an attacker cannot steer towards a stored one, never on
        how many characters of a real key were guessed."""
        self._maybe_reload()
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return None
        return self._keys.get(_digest(key.strip()))


__all__ = ["CLIENT_PATTERN", "ApiKeys", "ParsedKeys", "parse_keys"]
