"""The few typed errors the toolkit raises. The CLI maps `UserError` subclasses to exit code 2."""

from __future__ import annotations


class MindsimError(Exception):
    """Base of every error the toolkit raises on purpose. Its text is scrubbed of secrets (`mindcore.redact`)
    wherever it goes: an error line, a failure row, a log."""

    def __str__(self) -> str:
        from mindsimkit.mindcore.redact import scrub

        return scrub(super().__str__())


class UserError(MindsimError):
    """Something the user can fix: bad config, bad input file, missing install. Exit code 2."""


class ConfigError(UserError):
    """A recipe or setting is invalid. The message names the field and how to fix it."""


class InputError(UserError):
    """An input file or dataset is malformed. The message names the file, line or column."""


class EngineUnavailable(UserError):
    """An engine cannot be reached or started (wrong URL, missing model or runtime)."""


class DiskFull(MindsimError):
    """The disk (or the user's quota) ran out while writing an output. Exit code 1: rerunning resumes."""


class EngineError(MindsimError):
    """A call to an LLM failed after its bounded retries."""


class TransportError(EngineError):
    """The server could not be reached or kept failing (connection, timeout, 5xx)."""


class FieldRefused(TransportError):
    """The server refused (HTTP 400) a request field the recipe makes the role send, and the message says
    which setting to change: a configuration problem, unlike a 400 that names none of the role's fields."""


class StructuredOutputError(EngineError):
    """The model kept returning output that does not fit the requested schema."""

    def __init__(self, message: str, *, attempts: int, last_error: str, raw: str | None):
        super().__init__(message)
        self.attempts = attempts
        self.last_error = last_error
        self.raw = raw
