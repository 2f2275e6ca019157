"""Stable codes shared by results and dead letters (part of the v1 contract).

Adding a code is a compatible change; renaming or removing one is not (see ``schemas/README.md``).
"""

from __future__ import annotations

from enum import StrEnum


class Task(StrEnum):
    """Upload task: ``card`` (rectify an ID card / passport) or ``id_photo`` (standard ID photo)."""

    CARD = "card"
    ID_PHOTO = "id_photo"


class Status(StrEnum):
    """Verdict of a VerificationResult."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    FAILED = "failed"


class ReasonCode(StrEnum):
    """Why a result is ``rejected`` / ``failed`` (may also annotate an ``accepted`` one)."""

    # card
    NO_CARD = "NO_CARD"
    PARTIAL_CARD = "PARTIAL_CARD"
    CARD_TOO_SMALL = "CARD_TOO_SMALL"
    MULTIPLE_CARDS = "MULTIPLE_CARDS"
    BLURRY = "BLURRY"
    GLARE = "GLARE"
    # card: capture quality (processors/card/quality.py; reject or annotate per profile)
    LOW_RESOLUTION = "LOW_RESOLUTION"
    TOO_OBLIQUE = "TOO_OBLIQUE"
    TOO_DARK = "TOO_DARK"
    TOO_BRIGHT = "TOO_BRIGHT"
    PHOTOCOPY = "PHOTOCOPY"
    NO_PORTRAIT = "NO_PORTRAIT"
    GLARE_ON_MRZ = "GLARE_ON_MRZ"
    # card: machine-readable zone (processors/card/mrz/, ICAO Doc 9303)
    MRZ_UNREADABLE = "MRZ_UNREADABLE"
    MRZ_MISSING = "MRZ_MISSING"  # an ID-3 page (passport, visa page) shows no zone at all
    MRZ_CHECK_DIGIT = "MRZ_CHECK_DIGIT"
    DOCUMENT_EXPIRED = "DOCUMENT_EXPIRED"
    # card: the upload's doc_type option against the document's measured shape
    DOC_TYPE_MISMATCH = "DOC_TYPE_MISMATCH"
    # id_photo
    NO_FACE = "NO_FACE"
    MULTIPLE_FACES = "MULTIPLE_FACES"
    FACE_TOO_SMALL = "FACE_TOO_SMALL"
    HEAD_CROPPED = "HEAD_CROPPED"
    # id_photo compliance (issue 39): one code per failed rule of the photo's size spec
    HEAD_TOO_SMALL = "HEAD_TOO_SMALL"  # chin-to-crown height below the spec's range
    HEAD_TOO_LARGE = "HEAD_TOO_LARGE"  # chin-to-crown height above the spec's range
    HEAD_TOO_HIGH = "HEAD_TOO_HIGH"  # crown margin under its minimum, or eye line above range
    HEAD_TOO_LOW = "HEAD_TOO_LOW"  # crown margin over its maximum, eye line or chin too low
    HEAD_NOT_CENTRED = "HEAD_NOT_CENTRED"  # the face's mid-point off the centre line
    HEAD_TILTED = "HEAD_TILTED"  # roll beyond the limit
    NOT_FACING_CAMERA = "NOT_FACING_CAMERA"  # yaw or pitch beyond the limit
    EYES_CLOSED = "EYES_CLOSED"
    MOUTH_OPEN = "MOUTH_OPEN"
    BACKGROUND_NOT_UNIFORM = "BACKGROUND_NOT_UNIFORM"
    BACKGROUND_COLOUR = "BACKGROUND_COLOUR"  # the background's colour breaks the spec's rule
    BACKGROUND_REPLACED = "BACKGROUND_REPLACED"  # retouched, and the issuer refuses that
    UNEVEN_LIGHTING = "UNEVEN_LIGHTING"  # the face's left and right halves lit unequally
    POOR_EXPOSURE = "POOR_EXPOSURE"  # the face too dark or too bright
    GREYSCALE = "GREYSCALE"  # no colour where the spec wants a colour photo
    # input
    UNSUPPORTED_FORMAT = "UNSUPPORTED_FORMAT"
    IMAGE_TOO_LARGE = "IMAGE_TOO_LARGE"
    IMAGE_TOO_SMALL = "IMAGE_TOO_SMALL"
    CORRUPT_IMAGE = "CORRUPT_IMAGE"
    OBJECT_NOT_FOUND = "OBJECT_NOT_FOUND"
    CHECKSUM_MISMATCH = "CHECKSUM_MISMATCH"  # claim-check object differs from its size/sha256
    OBJECT_REFUSED = "OBJECT_REFUSED"  # the object store refused the ref (e.g. an invalid key)
    IMAGE_TOO_COMPLEX = "IMAGE_TOO_COMPLEX"  # decoding would take more work than its pixels
    # processing
    INTERNAL_ERROR = "INTERNAL_ERROR"
    # the upload's deadline (or the task's maximum age) had passed when its batch formed: it is
    # answered without running a model
    STALE = "STALE"


class DeadLetterCode(StrEnum):
    """Why an event went to the dead-letter topic instead of producing a result."""

    NOT_JSON = "NOT_JSON"
    SCHEMA_INVALID = "SCHEMA_INVALID"
    UNSUPPORTED_SCHEMA_VERSION = "UNSUPPORTED_SCHEMA_VERSION"
    BUCKET_NOT_ALLOWED = "BUCKET_NOT_ALLOWED"
    INLINE_TOO_LARGE = "INLINE_TOO_LARGE"
    BAD_BASE64 = "BAD_BASE64"
    KEY_MISMATCH = "KEY_MISMATCH"
    PROCESSING_ERROR = "PROCESSING_ERROR"
    POISON = "POISON"  # the input crashed or hung the worker every time it was tried
    UNREADABLE_RECORD = "UNREADABLE_RECORD"  # the Kafka client cannot read a part of the record
