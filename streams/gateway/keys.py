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
from pathlib import Path

from streams.gateway.errors import ApiKeysError

CLIENT_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
KEY_PATTERN = re.compile(r"[!-9;-~]{16,256}")  # printable ASCII, no space, no ':'


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def parse_keys(text: str) -> dict[bytes, str]:
    """``client:key`` lines -> {sha256(key): client}.

    Raises:
        ApiKeysError: a line that is not ``client:key``, a bad client name or key, or one key
            given to two clients (the message names the line number, never the key).
    """
    out: dict[bytes, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        client, sep, key = line.partition(":")
        if not sep or not CLIENT_PATTERN.fullmatch(client):
            raise ApiKeysError(f"line {n}: expected 'client:key' with a client name of "
                               "[a-z0-9-] (1-32 characters)")
        if not KEY_PATTERN.fullmatch(key):
            raise ApiKeysError(f"line {n}: the key of {client} must be 16-256 printable ASCII "
                               "characters without spaces or ':'")
        d = _digest(key)
        if out.get(d, client) != client:
            raise ApiKeysError(f"line {n}: this key is also given to {out[d]}")
        out[d] = client
    if not out:
        raise ApiKeysError("no 'client:key' line: no client could call the gateway")
    return out


class ApiKeys:
    """The clients' keys, reloaded when the file changes (a Secret update in Kubernetes).

    Args:
        path: the keys file.
        reload_s: least seconds between two checks of the file's modification time.
        clock: monotonic seconds (tests pass their own).

    Raises:
        ApiKeysError: at construction, the file cannot be read or parsed. A later reload that
            fails keeps the keys loaded before (and says so in the ``error`` attribute).
    """

    def __init__(self, path: Path, reload_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.reload_s = reload_s
        self._clock = clock
        self._lock = threading.Lock()
        self.error: str | None = None
        self._mtime, self._keys = self._read()
        self._names = frozenset(self._keys.values())
        self._checked = self._clock()

    def _read(self) -> tuple[float, dict[bytes, str]]:
        try:
            st = os.stat(self.path)
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ApiKeysError(f"cannot read the API keys file {self.path}: "
                               f"{getattr(e, 'strerror', None) or type(e).__name__}") from None
        return st.st_mtime, parse_keys(text)

    @property
    def clients(self) -> list[str]:
        """The client names (sorted)."""
        return sorted(set(self._keys.values()))

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
                if os.stat(self.path).st_mtime == self._mtime:
                    return
                self._mtime, self._keys = self._read()
                self._names = frozenset(self._keys.values())
                self.error = None
            except (OSError, ApiKeysError) as e:
                self.error = str(e)  # keep serving with the keys loaded before

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


__all__ = ["CLIENT_PATTERN", "ApiKeys", "parse_keys"]
