"""Errors of the image processors (pure compute, no I/O)."""

from __future__ import annotations

from schemas.errors import CardstreamError


class ProcessorError(CardstreamError):
    """Root of the errors raised by ``processors``."""


class DecodeError(ProcessorError):
    """Image bytes refused by safe decoding.

    Attributes:
        reason: the reason code for the result (``UNSUPPORTED_FORMAT``, ``IMAGE_TOO_LARGE``,
            ``IMAGE_TOO_SMALL``, ``CORRUPT_IMAGE``).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ModelError(ProcessorError):
    """A model file is missing, fails its SHA-256 pin, or cannot be loaded."""


class ProviderError(ProcessorError):
    """The requested execution provider (e.g. CUDA) is not active in the ONNX Runtime session."""


class EvalSetError(ProcessorError):
    """A labelled image set cannot be scored: no manifest, a malformed case, an unreadable
    listed file, or no case to score."""
