"""The exception root of cardstream and the contract errors.

Every error the project raises on purpose derives from :class:`CardstreamError`; each package
has its own module of errors (``schemas.errors``, ``processors.errors``, ``streams.errors``).
"""

from __future__ import annotations


class CardstreamError(Exception):
    """Root of every error raised on purpose by cardstream."""


class ContractError(CardstreamError):
    """An event does not satisfy its contract.

    Attributes:
        code: stable error code put on the dead-letter topic (e.g. ``SCHEMA_INVALID``).
        path: JSON path of the first problem (``$.image.ref.bucket``), or ``$``.
    """

    def __init__(self, code: str, message: str, path: str = "$") -> None:
        super().__init__(message)
        self.code = code
        self.path = path
