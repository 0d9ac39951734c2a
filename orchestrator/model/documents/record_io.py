"""The base of every JSON record orchestrator writes, and how a record file is read and written.

pydantic v2 rather than msgspec: its errors carry the exact key path (`loc`) of every
bad value, which is what a person needs to fix a file by hand, and its models export a
JSON Schema; our files are small, so msgspec's speed would buy nothing.

Every record names its `schema` and `schema_version`. `read_record` refuses a file from
a newer orchestrator, migrates the older layouts it knows (each migration says what it
changes), and reports any other mismatch as RecordError with the file and the key path.
`write_record` writes atomically. The records themselves live beside what they describe:
build.json's in model/documents/records.py, release.json's in
model/documents/release_summary.py, ...
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, StringConstraints
from pydantic import ValidationError as PydanticValidationError

from orchestrator.config.nesting import loads_json
from orchestrator.errors import OrchestratorError

JsonDict = dict[str, Any]
# A file of an artifact folder, joined onto it by verify and reproduce: a name, no path.
FileName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9._+-]*$")]
# version -> a function that turns a document of that version into the next one
Migrations = Mapping[int, Callable[[JsonDict], JsonDict]]


class RecordError(OrchestratorError):
    """A JSON record is unreadable, malformed, or from a schema this version cannot read."""

    exit_code = 59
    summary = (
        "a JSON record (`build.json`, `release.json`, ...) is unreadable, malformed, or of a "
        "schema this version cannot read"
    )
    default_hint = (
        "The file was edited, truncated, or written by another orchestrator version; "
        "rebuild it (orchestrator build / release) rather than editing it by hand."
    )


class Record(BaseModel):
    """Base of every file record: strict keys, immutable once read."""

    # `schema_` in Python, `schema` in JSON: it dodges BaseModel's deprecated `schema` method.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    SCHEMA: ClassVar[str]
    VERSION: ClassVar[int]
    MIGRATIONS: ClassVar[Migrations] = {}

    def dump(self) -> JsonDict:
        return self.model_dump(mode="json", by_alias=True)


R = TypeVar("R", bound=Record)


def _version_of(document: JsonDict, model: type[Record]) -> int:
    """The document's schema version; 0 for the records written before they had one."""
    schema = document.get("schema")
    if schema is None and "schema_version" not in document:
        return 0
    if isinstance(schema, str) and "@" in schema and "schema_version" not in document:
        name, _, spelled = schema.partition("@")
        if name == model.SCHEMA and spelled.isdigit():
            return int(spelled)
    if schema != model.SCHEMA:
        raise RecordError(f"is not a {model.SCHEMA} record (schema {schema!r})")
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"schema_version must be an integer, not {version!r}")
    return version


def _migrated(document: object, model: type[Record]) -> JsonDict:
    """The document in the model's current layout, or RecordError saying why not."""
    if not isinstance(document, dict):
        raise RecordError(f"expected a JSON object, got {type(document).__name__}")
    version = _version_of(document, model)
    if version > model.VERSION:
        raise RecordError(
            f"has {model.SCHEMA} schema version {version}; this orchestrator reads up to "
            f"{model.VERSION}",
            hint="Read it with the orchestrator version that wrote it, or a newer one.",
        )
    while version < model.VERSION:
        migrate = model.MIGRATIONS.get(version)
        if migrate is None:
            raise RecordError(
                f"has {model.SCHEMA} schema version {version}, which this orchestrator "
                f"cannot migrate (it migrates from {sorted(model.MIGRATIONS) or 'none'})",
                hint="Rebuild it with this orchestrator.",
            )
        document = migrate(document)
        version += 1
    return document


def parse_record(document: object, model: type[R], where: str) -> R:
    """Validate (and migrate) a decoded JSON document; errors name `where` and the key."""
    try:
        return model.model_validate(_migrated(document, model))
    except RecordError as error:
        raise RecordError(f"{where}: {error.message}", hint=error.hint) from None
    except PydanticValidationError as error:
        first = error.errors()[0]
        path = ".".join(str(part) for part in first["loc"]) or "(top level)"
        more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
        raise RecordError(f"{where}: {path}: {first['msg']}{more}") from None


def read_record(path: Path, model: type[R]) -> R:
    try:
        document = loads_json(path.read_text())  # nesting bounded: a ValueError
    except FileNotFoundError:
        raise RecordError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"{path}: not readable JSON: {exc}") from None
    return parse_record(document, model, str(path))


def record_text(record: Record) -> str:
    """Stable text: sorted keys, two-space indent, a final newline."""
    return json.dumps(record.dump(), indent=2, sort_keys=True) + "\n"


def write_record(path: Path, record: Record) -> Path:
    """Write atomically (a temporary file in the same folder, then a rename); a failed
    write leaves neither a partial file nor a half-written record behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = record_text(record)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, delete=False, prefix=f".{path.name}.", suffix=".partial"
    ) as handle:
        partial = Path(handle.name)
    try:
        partial.write_text(text)
        partial.chmod(0o644)  # published files are for everyone to read
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return path
