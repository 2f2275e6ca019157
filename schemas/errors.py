"""The exception root of cardstream and the contract errors.

Every error the project raises on purpose derives from :class:`CardstreamError`; each package
has its own module of errors (``schemas.errors``, ``processors.errors``, ``streams.errors``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError


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


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem pydantic found in a value.

    Attributes:
        loc: where: field names and list indexes from the model's root (``("options",
            "size")``); empty for the value as a whole.
        msg: pydantic's message, its first line only: never its documentation link nor the
            input (which may be a secret or personal data).
    """

    loc: tuple[str | int, ...]
    msg: str

    def __str__(self) -> str:
        """``options.size: Input should be ...`` (the message alone when ``loc`` is empty)."""
        return f"{'.'.join(map(str, self.loc))}: {self.msg}" if self.loc else self.msg


def field_errors(err: ValidationError) -> list[FieldError]:
    """Every problem of ``err`` (a ``pydantic.ValidationError``), in pydantic's order; a
    validator's own ``ValueError`` as its message alone, without pydantic's ``Value error, ``
    (it reached the CLI's lines: ``Invalid value for '--task': Value error, 'nosuch' is not
    one of ...``, a fresh user's trial)."""
    return [FieldError(tuple(e["loc"]), _first_line(e["msg"], e["type"]))
            for e in err.errors(include_url=False, include_input=False)]


def _first_line(msg: str, kind: str) -> str:
    line = msg.splitlines()[0] if msg else ""
    prefix = "Value error, "
    return line[len(prefix):] if kind == "value_error" and line.startswith(prefix) else line


def validation_message(err: ValidationError, paths: bool = True) -> str:
    """The one-line message of ``err``: its problems joined by ``"; "``, each ``loc: msg``
    (``msg`` alone with ``paths`` False, where the caller names the field itself, e.g. a CLI
    option)."""
    return "; ".join(str(f) if paths else f.msg for f in field_errors(err))
