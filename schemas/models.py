"""Pydantic v2 mirrors of the v1 JSON Schema files (``schemas/*.v1.schema.json``).

The JSON Schema files are the contract other teams read; these frozen models are how Python code
builds and reads events. ``tests/unit/test_schemas.py`` validates one corpus of valid and invalid
examples (``schemas/examples/``) and generated events against both and fails if they disagree.

JSON semantics are kept: strings are never coerced from numbers, integers accept ``1`` and ``1.0``
but not ``true`` or ``"1"``, numbers accept integers and floats but not NaN/Infinity, and
``null`` for an optional field means the same as leaving it out.

Canonical serialisation (:meth:`_Model.canonical`, used by ``schemas.codec``): fields in the order
declared here (the order of ``properties`` in the schema files), optional fields that are ``None``
left out, required-but-nullable fields (``quad``, ``rectified``, ``photo``, ``face_box``, ...)
written as ``null``, floats always with a fraction (``12.0``). Unknown fields are ignored on input
and so are not written back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    SerializeAsAny,
    Strict,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from schemas import formats as F
from schemas.reasons import DeadLetterCode, ReasonCode, Status, Task

#: The schema version these models read and write.
SCHEMA_VERSION: Final = 1


ProfileName = Literal["strict", "normal", "relaxed"]
"""A card upload's verification profile (``processors.card.policy.PROFILES``)."""


class DocTypeHint(StrEnum):
    """Card upload option ``doc_type``: what the producer expects to be photographed."""

    ID_CARD = "id_card"  # ISO/IEC 7810 ID-1, 85.60 x 53.98 mm
    PASSPORT = "passport"  # ISO/IEC 7810 ID-3 (ICAO 9303 TD3 data page), 125 x 88 mm
    AUTO = "auto"


class DocType(StrEnum):
    """Card result ``doc_type``: the document format the worker found."""

    ID_CARD = "id_card"
    PASSPORT = "passport"
    UNKNOWN = "unknown"


class PhotoSize(StrEnum):
    """ID-photo size specification (print size; pixels at the worker's configured dpi).

    ``one_inch`` 25 x 35 mm and ``two_inch`` 35 x 49 mm (Chinese 1-inch/2-inch photo sizes),
    ``cn_passport`` 33 x 48 mm, ``us_passport`` 2 x 2 in (US Department of State),
    ``schengen`` 35 x 45 mm (ICAO 9303 / Schengen visa photo); since issue 39 also
    ``cn_visa``, ``us_visa``, ``uk_passport``, ``canada_passport`` (50 x 70 mm),
    ``canada_visa``, ``india_passport`` and ``japan_passport``. Each size's rules and sources:
    ``processors/idphoto/specs.json``.
    """

    ONE_INCH = "one_inch"
    TWO_INCH = "two_inch"
    CN_PASSPORT = "cn_passport"
    US_PASSPORT = "us_passport"
    SCHENGEN = "schengen"
    CN_VISA = "cn_visa"
    US_VISA = "us_visa"
    UK_PASSPORT = "uk_passport"
    CANADA_PASSPORT = "canada_passport"
    CANADA_VISA = "canada_visa"
    INDIA_PASSPORT = "india_passport"
    JAPAN_PASSPORT = "japan_passport"


class PhotoMode(StrEnum):
    """What the ID-photo task does to the upload: ``retouch`` (a new background, framed) or
    ``validate`` (crop and frame only, the upload's own background kept and checked)."""

    RETOUCH = "retouch"
    VALIDATE = "validate"


# ---------------------------------------------------------------------------------------------
# JSON-semantics scalar types


def _json_int(v: Any) -> Any:
    # JSON Schema "integer" is any number with a zero fractional part (1.0 included), never bool.
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return int(v)
    return v


@dataclass(frozen=True, slots=True)
class _Pattern:
    """A string's check against ``pattern`` (:func:`schemas.formats.matches`; ``what`` names
    it in the error), published as the JSON Schema's ``pattern`` (an ``AfterValidator`` is
    not: ``GET /v1/tasks`` showed a background as any string, a fresh user's trial)."""

    pattern: str
    what: str

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        def check(v: str) -> str:
            if not F.matches(self.pattern, v):
                raise ValueError(f"not a valid {self.what}")
            return v

        return core_schema.no_info_after_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {**handler(schema), "pattern": self.pattern}


@dataclass(frozen=True, slots=True)
class _JsonInt:
    """An integer as JSON Schema has it (:func:`_json_int`: ``1.0`` counts, ``true`` does not),
    within ``ge`` .. ``le``; the bounds are the inner int's, so the JSON Schema publishes them
    as ``minimum`` / ``maximum`` (put beside a before-validator they came out as ``ge`` /
    ``le``, which JSON Schema does not know: ``GET /v1/tasks``'s dpi, a fresh user's trial)."""

    ge: int | None = None
    le: int | None = None

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(
            _json_int, core_schema.int_schema(ge=self.ge, le=self.le, strict=True))


def _schema_version(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError("schema_version must be the integer 1")  # noqa: TRY004 (pydantic)
    return _json_int(v)


def _code(known: type[StrEnum]) -> AfterValidator:
    # Codes are open-ended: a producer may add one (a compatible change), so an unknown code that
    # looks like a code is kept as a plain str; known ones become the enum member.
    values = {m.value: m for m in known}

    def check(v: str) -> str:
        if not F.matches(F.CODE_PATTERN, v):
            raise ValueError("not a valid code")
        return values.get(v, v)

    return AfterValidator(check)


def _rfc3339(v: str) -> str:
    if not F.is_rfc3339(v):
        raise ValueError("not an RFC 3339 date-time")
    return v


NonNegInt = Annotated[int, _JsonInt(ge=0)]
PosInt = Annotated[int, _JsonInt(ge=1)]
Dpi = Annotated[int, _JsonInt(ge=72, le=1200)]
JsonFloat = Annotated[float, Strict(), Field(allow_inf_nan=False)]
NonNegFloat = Annotated[JsonFloat, Field(ge=0)]
Str = Annotated[str, Strict()]
UploadId = Annotated[Str, _Pattern(F.UPLOAD_ID_PATTERN, "upload_id")]
BucketName = Annotated[Str, _Pattern(F.BUCKET_PATTERN, "bucket name")]
ObjectKey = Annotated[Str, _Pattern(F.OBJECT_KEY_PATTERN, "object key")]
Sha256Hex = Annotated[Str, _Pattern(F.SHA256_PATTERN, "lowercase hex SHA-256")]
MediaType = Annotated[Str, _Pattern(F.MEDIA_TYPE_PATTERN, "media type")]
Opaque = Annotated[Str, _Pattern(F.OPAQUE_PATTERN, "opaque token")]
Background = Annotated[Str, _Pattern(F.BACKGROUND_PATTERN, "background")]
B64 = Annotated[Str, _Pattern(F.B64_PATTERN, "padded base64")]
OneLine = Annotated[Str, Field(max_length=500), _Pattern(F.ONE_LINE_PATTERN, "one-line text")]
Rfc3339 = Annotated[Str, AfterValidator(_rfc3339)]
Name = Annotated[Str, Field(min_length=1, max_length=256)]
Point = tuple[JsonFloat, JsonFloat]
SchemaVersion = Annotated[Literal[1], BeforeValidator(_schema_version)]
Reason = Annotated[Str, _code(ReasonCode)]


def _known_task(v: str) -> str:
    # a v1 task becomes its Task member; a registered task (register_task) stays a plain str
    if v not in TASKS:
        raise ValueError(f"not a known task: {', '.join(TASKS)}")
    return Task(v) if v in V1_TASKS else v


TaskName = Annotated[Str, AfterValidator(_known_task)]
DlqCode = Annotated[Str, _code(DeadLetterCode)]


class _Model(BaseModel):
    """Frozen, unknown fields ignored, canonical serialisation (optional ``None`` left out)."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    @model_serializer(mode="wrap")
    def _omit_optional_none(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        fields = type(self).model_fields
        return {k: v for k, v in data.items()
                if not (v is None and k in fields and not fields[k].is_required())}

    def canonical(self) -> dict[str, Any]:
        """The JSON-ready dict in canonical form (see module docstring)."""
        return self.model_dump(mode="json")


class _Closed(_Model):
    """An object whose unknown fields are refused (``additionalProperties: false``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def _not_null(v: Any) -> Any:
    if v is None:
        raise ValueError("must not be null")
    return v


# ---------------------------------------------------------------------------------------------
# UploadEvent


class ImageRef(_Model):
    """Claim check: the upload's image is the object ``bucket``/``key`` in the object store.

    Attributes:
        bucket: S3 bucket name; the consumer refuses buckets outside its allow-list.
        key: object key (1..1024 chars, no ``.``/``..`` segment, no leading ``/``).
        size_bytes: object size in bytes, if the producer knows it.
        sha256: lowercase hex SHA-256 of the object bytes, if the producer knows it.
    """

    bucket: BucketName
    key: ObjectKey
    size_bytes: NonNegInt | None = None
    sha256: Sha256Hex | None = None


class ImageSource(_Model):
    """Exactly one of ``ref`` (claim check) or ``inline_b64`` (RFC 4648 section 4 base64, padded,
    no whitespace; at most the consumer's inline limit, 512 KiB decoded by default)."""

    ref: ImageRef | None = None
    inline_b64: Annotated[Str, Field(min_length=1)] | None = None

    _nn = field_validator("ref", "inline_b64", mode="before")(_not_null)

    @model_validator(mode="after")
    def _exactly_one(self) -> ImageSource:
        if (self.ref is None) == (self.inline_b64 is None):
            raise ValueError("image needs exactly one of 'ref' or 'inline_b64'")
        return self


class CardOptions(_Closed):
    """Options of a ``card`` upload.

    Attributes:
        doc_type: hint, default the worker's ``CARDSTREAM_CARD__DOC_TYPE`` (``auto``).
        profile: which capture-quality and MRZ findings reject the result and the bounds they
            are judged against (``strict`` | ``normal`` | ``relaxed``); default: the worker's
            setting (``normal``: none rejects).
        mrz_values: put the MRZ's field values (names, numbers, dates) into the result; only
            honoured where the worker's setting allows it (off by default).
    """

    doc_type: DocTypeHint | None = None
    profile: ProfileName | None = None
    mrz_values: Annotated[bool, Strict()] | None = None


class IdPhotoOptions(_Closed):
    """Options of an ``id_photo`` upload.

    Attributes:
        size: size specification, default the worker's ``CARDSTREAM_IDPHOTO__DEFAULT_SIZE``
            (``one_inch``).
        background: ``white`` | ``blue`` | ``red`` | ``#RRGGBB`` (sRGB hex), default the
            worker's ``CARDSTREAM_IDPHOTO__DEFAULT_BACKGROUND`` (``white``).
        alpha_matting: refine the matte edge; ``None`` = the size's default.
        mode: ``retouch`` (default) or ``validate``.
        dpi: the photo's resolution and the JPEG's density (72..1200); default the size's (300).
        target_kb: the largest JPEG file size in KB (1000 bytes); the quality is lowered to fit.
        print_sheet: also store a 6 x 4 in print sheet with as many copies as fit.
    """

    size: PhotoSize | None = None
    background: Background | None = None
    alpha_matting: Annotated[bool, Strict()] | None = None
    mode: PhotoMode | None = None
    dpi: Dpi | None = None
    target_kb: Annotated[JsonFloat, Field(ge=5, le=10000)] | None = None
    print_sheet: Annotated[bool, Strict()] | None = None


class UploadEvent(_Model):
    """An identity upload to process (topic ``cardstream.uploads.v1``, key = ``upload_id``).

    Attributes:
        schema_version: 1 (absent means 1).
        upload_id: 1..128 chars of ``[A-Za-z0-9._-]``, not ``.``/``..``; used in object keys.
        task: a :class:`~schemas.reasons.Task` of the v1 contract (or a task registered with
            :func:`register_task`).
        image: where the image bytes are (:class:`ImageSource`).
        content_type: optional media-type hint (the worker sniffs magic bytes anyway).
        submitted_at: RFC 3339 time the user submitted the upload.
        options: the task's options model (:data:`TASKS`), e.g. :class:`CardOptions` for ``card``.
        trace_id: optional opaque tracing id, copied to the result.
        subject_ref: optional opaque reference to the person (never a name or an ID number).
        deadline: optional RFC 3339 time after which the producer no longer wants an answer
            computed: an upload whose deadline has passed when its batch forms is answered
            ``rejected`` with ``STALE`` and no model runs (``schemas/README.md``).
    """

    schema_version: SchemaVersion = SCHEMA_VERSION
    upload_id: UploadId
    task: TaskName
    image: ImageSource
    content_type: MediaType | None = None
    submitted_at: Rfc3339 | None = None
    options: SerializeAsAny[_Closed] | None = None
    trace_id: Opaque | None = None
    subject_ref: Opaque | None = None
    deadline: Rfc3339 | None = None

    @field_validator("options", mode="before")
    @classmethod
    def _options_for_task(cls, v: Any, info: ValidationInfo) -> Any:
        task = info.data.get("task")
        if v is None or task is None:
            return v
        want = TASKS[task].options
        if isinstance(v, BaseModel) and not isinstance(v, want):
            raise ValueError(f"options of a {task} upload must be {want.__name__}")  # noqa: TRY004
        return want.model_validate(v)


# ---------------------------------------------------------------------------------------------
# VerificationResult


class ObjectRef(_Model):
    """An output object the worker stored (results bucket).

    Attributes:
        bucket, key: where it is; key layout
            ``{task}/{model_version}/{upload_id}/{input_tag}/{artifact}.{ext}``.
        size_bytes: object size in bytes.
        sha256: lowercase hex SHA-256 of the object bytes.
        content_type: media type, e.g. ``image/jpeg`` / ``image/png``.
        width, height: image size in pixels.
    """

    bucket: BucketName
    key: ObjectKey
    size_bytes: NonNegInt
    sha256: Sha256Hex
    content_type: MediaType
    width: PosInt
    height: PosInt


class QualityBounds(_Model):
    """The bounds a card's capture quality was judged against (its profile's)."""

    min_dpi: NonNegFloat
    max_tilt_deg: NonNegFloat
    min_brightness: NonNegFloat
    max_brightness: NonNegFloat
    min_colourfulness: NonNegFloat
    max_glare_mrz: NonNegFloat


Share = Annotated[JsonFloat, Field(ge=0, le=1)]
Flag = Annotated[bool, Strict()]


class CardQuality(_Model):
    """Capture-quality measures of a found card (``processors/card/quality.py``).

    Attributes:
        dpi: effective resolution of the document in the photo (dots per inch).
        tilt_deg: angle between the document's normal and the camera's axis (degrees).
        margin: the corners' smallest distance to the frame, share of its shorter side
            (negative: a corner outside).
        brightness, contrast: mean and standard deviation of the rectified card's grey (0-255).
        focus: variance of the Laplacian of the rectified card (the BLURRY measure).
        glare, glare_mrz, glare_portrait: saturated share of the card, of its MRZ band and of
            its portrait zone.
        colourfulness: chroma spread of the card, or of its portrait zone where a face is found
            there and the zone is more colourful (about 0 for a black-and-white copy).
        portrait: a face found in the portrait zone; ``None`` where the document carries none
            (the back of an ID-1 card) or the check is off.
        profile: the profile that judged these.
        bounds: its bounds.
    """

    dpi: NonNegFloat
    tilt_deg: NonNegFloat
    margin: JsonFloat
    brightness: NonNegFloat
    contrast: NonNegFloat
    focus: NonNegFloat
    glare: Share
    glare_mrz: Share
    glare_portrait: Share
    colourfulness: NonNegFloat
    portrait: Flag | None = None
    profile: Name
    bounds: QualityBounds


class MrzChecks(_Model):
    """Each ICAO Doc 9303 check digit of a read MRZ: valid or not (``optional_data``: TD3 only;
    ``None`` also where the personal number is all filler with a filler check digit;
    ``composite``: ``None`` for a visa, MRVA or MRVB, which has none: Doc 9303 part 7)."""

    document_number: Flag
    birth_date: Flag
    expiry_date: Flag
    optional_data: Flag | None = None
    composite: Flag | None


class MrzValues(_Model):
    """The printed fields of a read MRZ (personal data: only when the upload asked and the
    worker allows it). Dates are ``YYMMDD`` as printed; fillers become spaces."""

    document_code: Str
    issuing_state: Str
    document_number: Str
    nationality: Str
    birth_date: Str
    sex: Str
    expiry_date: Str
    primary_name: Str
    secondary_name: Str
    optional_data: Str


class MrzInfo(_Model):
    """The machine-readable zone of a found document.

    Attributes:
        found: a zone of MRZ-shaped lines was located and read (false: "no MRZ").
        format: ``TD1`` | ``TD2`` | ``TD3``, or a machine-readable visa (Doc 9303 part 7):
            ``MRVA`` (2 lines of 44) | ``MRVB`` (2 of 36).
        readable: it reads as that format, fits the document's size, with few uncertain
            characters (false: ``MRZ_UNREADABLE``).
        valid: readable and every check digit valid.
        checks: each check digit (null when not readable).
        expired: the document had expired at the result's ``processed_at`` (null: unknown).
        corrected: a character of the zone read was corrected from the recogniser's own
            alternatives (by the field's type or a check digit); false where not readable
            (no read is given).
        values: the printed fields, when asked and allowed.
        values_withheld: ``true`` when the upload asked for the values and the worker's
            setting does not allow them (absent otherwise, never ``false``, never beside
            ``values``; added in v1), so that a platform can tell a refusal from a zone
            without values (or from no zone: it says only that values were asked and not
            allowed).
    """

    found: Flag
    format: Literal["TD1", "TD2", "TD3", "MRVA", "MRVB"] | None = None
    readable: Flag
    valid: Flag
    checks: MrzChecks | None = None
    expired: Flag | None = None
    corrected: Flag
    values: MrzValues | None = None
    values_withheld: Literal[True] | None = None

    @model_validator(mode="after")
    def _values_or_withheld(self) -> MrzInfo:
        if self.values is not None and self.values_withheld:
            raise ValueError("mrz has both values and values_withheld")
        return self


class CardPayload(_Model):
    """Card result.

    Attributes:
        quad: the card's corners TL, TR, BR, BL as ``(x, y)`` in source pixels (after EXIF
            orientation; origin top-left, x right, y down), or ``None`` when no card was found.
            For a rectified card TL is the corner that became the upright output's top-left.
        confidence: detector confidence in [0, 1].
        doc_type: ``id_card`` | ``passport`` | ``unknown``.
        rectified: the perspective-corrected card image, or ``None`` when not produced.
        quality: capture-quality measures (a card found and judged; absent otherwise).
        mrz: the machine-readable zone (a card found and judged; absent otherwise).
    """

    quad: tuple[Point, Point, Point, Point] | None
    confidence: Annotated[JsonFloat, Field(ge=0, le=1)]
    doc_type: DocType
    rectified: ObjectRef | None
    quality: CardQuality | None = None
    mrz: MrzInfo | None = None


CheckName = Annotated[Str, _Pattern(F.CHECK_NAME_PATTERN, "check name")]


class ComplianceCheck(_Model):
    """One rule of an ID photo's compliance report.

    Attributes:
        name: the rule (``head_height``, ``crown_margin``, ``eye_line``, ``chin_margin``,
            ``centring``, ``roll``, ``yaw``, ``pitch``, ``eyes_open``, ``mouth_closed``,
            ``background_uniformity``, ``background_colour``, ``background_replacement``,
            ``illumination_symmetry``, ``exposure``, ``colour``, ``sharpness``; others may
            be added).
        value: the measured value, or ``None`` when it could not be measured.
        unit: ``share`` (of the photo's height, or width for ``centring``), ``mm``, ``deg``,
            ``ratio``, ``luma``, ``luma_std``, ``chroma``, ``bool``.
        bound: ``[min, max]`` from the size's spec or the service's settings, either ``None``
            when open; ``None`` when the rule has no bound for this size.
        passed: whether the value meets the bound; ``None`` when not decided.
    """

    name: CheckName
    value: JsonFloat | None
    unit: Annotated[Str, Field(min_length=1, max_length=32)]
    bound: tuple[JsonFloat | None, JsonFloat | None] | None
    passed: Annotated[bool, Strict()] | None


class IdPhotoCompliance(_Model):
    """Whether an ID photo meets its size's rules (issue 39).

    Attributes:
        spec: the size whose rules were checked.
        mode: ``retouch`` or ``validate``.
        compliant: every decided check passed (failed checks' codes are in ``reasons``).
        checks: one entry per rule, in a fixed order.
    """

    spec: PhotoSize
    mode: PhotoMode
    compliant: Annotated[bool, Strict()]
    checks: tuple[ComplianceCheck, ...]


class IdPhotoPayload(_Model):
    """ID-photo result.

    Attributes:
        photo: the framed photo on its background, or ``None`` when not produced.
        size: the size specification used.
        background: the background used (``white``/``blue``/``red``/``#RRGGBB``).
        face_box: the face ``(x, y, w, h)`` in source pixels, or ``None`` when no face was found.
        width, height: output size in pixels of the size specification.
        mode: ``retouch`` or ``validate`` (added in issue 39; absent: ``retouch``).
        dpi: the photo's resolution (the JPEG's JFIF density).
        compliance: the compliance report, when a face was framed.
        sheet: the 6 x 4 in print sheet, when asked for (``print_sheet``).
        target_kb_met: with ``target_kb``: whether the JPEG fits it (False: it is at the lowest
            quality allowed and still larger).
    """

    photo: ObjectRef | None
    size: PhotoSize
    background: Background
    face_box: tuple[NonNegFloat, NonNegFloat, NonNegFloat, NonNegFloat] | None
    width: PosInt
    height: PosInt
    mode: PhotoMode | None = None
    dpi: PosInt | None = None
    compliance: IdPhotoCompliance | None = None
    sheet: ObjectRef | None = None
    target_kb_met: Annotated[bool, Strict()] | None = None


OptionsModel = _Closed
"""Base of a task's options model: frozen, ``None`` = the default, unknown fields refused."""
PayloadModel = _Model
"""Base of a task's result payload model: frozen, optional ``None`` fields left out."""


@dataclass(frozen=True)
class TaskContract:
    """What the contract says about one task.

    Attributes:
        name: the task's value of ``UploadEvent.task`` and ``VerificationResult.task``.
        options: model of the upload's ``options`` (unknown fields refused; absent = defaults).
        payload: model of the result's payload, the result's field named after the task (None:
            the task's results carry none).
    """

    name: str
    options: type[OptionsModel]
    payload: type[PayloadModel] | None


V1_TASKS: dict[str, TaskContract] = {
    Task.CARD: TaskContract(Task.CARD, CardOptions, CardPayload),
    Task.ID_PHOTO: TaskContract(Task.ID_PHOTO, IdPhotoOptions, IdPhotoPayload),
}
"""The tasks of the v1 contract, as its JSON Schema files name them."""

TASKS: dict[str, TaskContract] = dict(V1_TASKS)
"""Every task events may name: the v1 tasks and those added by :func:`register_task`."""


def register_task(contract: TaskContract) -> None:
    """Accept events of a task beyond the v1 contract (a new task, or a test's toy task).

    ``task`` then also takes ``contract.name`` (the codec's JSON Schema check included), the
    upload's ``options`` are checked by ``contract.options`` and the result's payload, carried
    under the task's name, by ``contract.payload``; the v1 JSON Schema files stay as published,
    so such a task is checked by its models alone. Registering the same contract again does
    nothing.

    Raises:
        ValueError: the name is not a contract-safe name (``[a-z][a-z0-9_]{0,31}``), is a field
            of :class:`VerificationResult`, or is taken by another contract.
    """
    name = contract.name
    if TASKS.get(name) == contract:
        return
    if name in TASKS or name in VerificationResult.model_fields:
        raise ValueError(f"task {name!r} is taken")
    if not F.matches(TASK_NAME_PATTERN, name):
        raise ValueError(f"task name {name!r} does not match {TASK_NAME_PATTERN}")
    TASKS[name] = contract


def unregister_task(name: str) -> None:
    """Undo :func:`register_task` (a v1 task stays).

    Raises:
        ValueError: ``name`` is a v1 task.
    """
    if name in V1_TASKS:
        raise ValueError(f"{name} is a task of the v1 contract")
    TASKS.pop(name, None)


TASK_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"
"""Names a registered task may take (it becomes a result field and an object-key segment)."""


class ModelRef(_Model):
    """The model that produced a result: ``name``, ``version`` and the ONNX Runtime execution
    ``provider`` actually used (``CUDAExecutionProvider``, ``CPUExecutionProvider``)."""

    name: Name
    version: Name
    provider: Name


class Timings(_Model):
    """Where the time went, in milliseconds.

    Attributes:
        queue_ms: from the record's Kafka timestamp to the start of its batch.
        batch_size: images in the inference call this upload was part of (0: no inference).
        inference_ms: the model call of that batch.
        total_ms: from the Kafka timestamp to the result being produced.
    """

    queue_ms: NonNegFloat
    batch_size: NonNegInt
    inference_ms: NonNegFloat
    total_ms: NonNegFloat


class SourceRef(_Model):
    """The Kafka record an output came from: ``topic``, ``partition``, ``offset``."""

    topic: Name
    partition: NonNegInt
    offset: NonNegInt


class VerificationResult(_Model):
    """The verdict on one upload (topic ``cardstream.results.v1``, key = ``upload_id``).

    Attributes:
        schema_version: 1.
        upload_id, task: from the upload.
        status: ``accepted`` | ``rejected`` | ``failed``.
        reasons: codes, no repeats (may be empty): :class:`~schemas.reasons.ReasonCode` members,
            or plain ``str`` for a code this version does not know (codes may be added).
        card: the card payload (``card`` uploads only).
        id_photo: the ID-photo payload (``id_photo`` uploads only).
        (a task registered with :func:`register_task`: its payload under the task's name.)
        model: the model used, or ``None`` when none ran (e.g. ``OBJECT_NOT_FOUND``).
        timings: :class:`Timings` (ms).
        source: the upload's Kafka record.
        processed_at: RFC 3339 time the result was made.
        submitted_at, trace_id: copied from the upload when present.
        cache_hit: True when the verdict was not computed for this upload but taken from an
            earlier upload of the same image bytes, task, options and model version (its output
            objects copied under this upload's keys); absent when the models ran for it.
    """

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)

    schema_version: SchemaVersion = SCHEMA_VERSION
    upload_id: UploadId
    task: TaskName
    status: Status
    reasons: tuple[Reason, ...]
    card: CardPayload | None = None
    id_photo: IdPhotoPayload | None = None
    model: ModelRef | None
    timings: Timings
    source: SourceRef
    processed_at: Rfc3339
    submitted_at: Rfc3339 | None = None
    trace_id: Opaque | None = None
    cache_hit: Annotated[bool, Strict()] | None = None

    @field_validator("reasons")
    @classmethod
    def _unique(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("reasons must not repeat")
        return v

    @model_validator(mode="before")
    @classmethod
    def _unknown_fields_ignored(cls, data: Any) -> Any:
        # unknown fields are ignored, as everywhere in the contract; a task registered beyond v1
        # keeps its payload, under its name (the only field this model takes beyond its own)
        if not isinstance(data, dict):
            return data
        own = data.get("task")
        return {k: v for k, v in data.items()
                if k in cls.model_fields or (k == own and k in TASKS and k not in V1_TASKS)}

    @model_validator(mode="after")
    def _payload_matches_task(self) -> VerificationResult:
        for name in V1_TASKS:
            if name != self.task and getattr(self, name) is not None:
                raise ValueError(f"a {self.task} result has no {name} payload")
        extra = self.__pydantic_extra__
        if extra:  # the payload of a registered task: checked by its model
            payload = TASKS[self.task].payload
            raw = extra.pop(self.task)
            if raw is not None and payload is not None:
                extra[self.task] = payload.model_validate(raw)
        return self

    @property
    def payload(self) -> BaseModel | None:
        """The task's payload (``card``, ``id_photo``, or a registered task's), None if absent."""
        return getattr(self, str(self.task), None)


# ---------------------------------------------------------------------------------------------
# DeadLetter


class Header(_Model):
    """One Kafka record header: ``key`` and its value as base64 (``None`` for a null value)."""

    key: Str
    value_b64: B64 | None


class QuarantineRef(_Model):
    """Where a dead letter's original value was put instead of into the dead letter: the object
    ``bucket``/``key`` of the quarantine bucket (short expiry; readable by operators only),
    ``size_bytes`` (bytes) and lowercase hex ``sha256`` of the value."""

    bucket: BucketName
    key: ObjectKey
    size_bytes: NonNegInt
    sha256: Sha256Hex


class DeadLetter(_Model):
    """An event that produced no result (topic ``cardstream.dlq.v1``, key = the original key).

    Attributes:
        schema_version: 1.
        key_b64: the original record key, base64, or ``None``.
        value_b64: the original value, base64, truncated to the worker's limit when
            ``value_truncated`` (0 bytes, ``""``, when the value was quarantined); ``None`` for a
            null value (tombstone).
        value_truncated: whether ``value_b64`` holds only the first bytes of the value.
        value_size: the original value's size in bytes.
        headers: the original headers in order.
        source: the original record.
        error_code: a :class:`~schemas.reasons.DeadLetterCode` (plain ``str`` if unknown here).
        error: one line (at most 500 chars) saying what was wrong, without personal data.
        failed_at: RFC 3339 time the worker gave up on the event.
        upload_id: the upload id when it could be read.
        quarantine: where the whole original value was stored instead (it may hold image bytes
            or personal fields), or ``None`` (added in v1 without a version bump: consumers
            ignore unknown fields).
        key_truncated: True when ``key_b64`` holds only the first bytes of the key (the dead
            letter's size budget); ``None`` otherwise.
        key_size: the original key's size in bytes when ``key_truncated``.
        headers_truncated: True when ``headers`` holds only the first headers, the last kept
            one possibly cut (the size budget); ``None`` otherwise.
    """

    schema_version: SchemaVersion = SCHEMA_VERSION
    key_b64: B64 | None
    value_b64: B64 | None
    value_truncated: Annotated[bool, Strict()]
    value_size: NonNegInt
    headers: tuple[Header, ...]
    source: SourceRef
    error_code: DlqCode
    error: OneLine
    failed_at: Rfc3339
    upload_id: UploadId | None = None
    quarantine: QuarantineRef | None = None
    key_truncated: Annotated[bool, Strict()] | None = None
    key_size: NonNegInt | None = None
    headers_truncated: Annotated[bool, Strict()] | None = None


# ---------------------------------------------------------------------------------------------
# ShadowDiff


MeasureName = Annotated[Str, _Pattern(F.MEASURE_PATTERN, "measure name")]


class ShadowSide(_Model):
    """One side of a shadow comparison: the ``model`` that ran (``None`` when none ran), its
    ``status`` and ``reasons``, as in the side's VerificationResult."""

    model: ModelRef | None
    status: Status
    reasons: tuple[Reason, ...]


class ShadowDiff(_Model):
    """A live result against the shadow model's on the same upload (topic
    ``cardstream.shadow.v1``, key = ``upload_id``).

    Attributes:
        schema_version: 1.
        upload_id, task: from the upload.
        live: the live result's model and verdict (what the results topic got).
        shadow: the shadow model version's verdict on the same image and options.
        verdict_changed: the two ``status`` differ.
        reasons_changed: the two sets of reason codes differ.
        measures: the task's comparison figures, name -> number (card: ``quad_iou``, the IoU in
            [0, 1] of the two quads when both found one); empty when none applies.
        shadow_ms: wall time of the shadow model's call for this upload's bucket (ms).
        source: the upload's Kafka record.
        processed_at: RFC 3339 time the comparison was made.
    """

    schema_version: SchemaVersion = SCHEMA_VERSION
    upload_id: UploadId
    task: TaskName
    live: ShadowSide
    shadow: ShadowSide
    verdict_changed: Annotated[bool, Strict()]
    reasons_changed: Annotated[bool, Strict()]
    measures: dict[MeasureName, JsonFloat]
    shadow_ms: NonNegFloat
    source: SourceRef
    processed_at: Rfc3339
