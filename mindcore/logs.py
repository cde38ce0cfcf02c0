"""Where third-party libraries' log lines go, so the console stays quiet and shows what matters.

distilabel logs every batch at INFO through a rich handler on the terminal, `datasets` draws its own
progress bars, and httpx/openai log each request: ten minutes of that buried our own progress bars and
the one line that mattered. During a job these go to `OUT/logs/` instead; `--verbose` leaves them on the
terminal. Our own messages (errors, warnings, summaries, progress bars) are not routed here.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from mindsimkit.mindcore.redact import scrub

LIBRARY_LOGGERS = (
    "distilabel",
    "datasets",
    "huggingface_hub",
    "httpx",
    "httpcore",
    "openai",
    "fsspec",
    "filelock",
    "urllib3",
)
_FORMAT = "[%(asctime)s] %(levelname)-8s %(name)s: %(message)s"


class _ScrubbingFormatter(logging.Formatter):
    """Library log lines (a request's URL, an error body that echoes a header) scrubbed of secrets before they
    reach OUT/logs/ (`mindcore.redact`)."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


def _file_handler(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(_ScrubbingFormatter(_FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
    return handler


@contextmanager
def library_logs_to(log_dir: Path | None, *, verbose: bool = False) -> Iterator[Path | None]:
    """Send library logs to `log_dir/libraries.log` (distilabel's to `log_dir/distilabel.log`) for the
    duration; with `verbose` or no folder, change nothing. Yields the folder used."""
    if verbose or log_dir is None:
        yield None
        return
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    handler = _file_handler(log_dir / "libraries.log")
    saved = []
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate, logger.level))
        logger.handlers[:] = [handler]
        logger.propagate = False
    restore_distilabel = _quiet_distilabel(log_dir / "distilabel.log")
    restore_datasets = _quiet_datasets()
    try:
        yield log_dir
    finally:
        restore_datasets()
        restore_distilabel()
        for logger, handlers, propagate, level in saved:
            logger.handlers[:] = handlers
            logger.propagate = propagate
            logger.setLevel(level)
        handler.close()


@contextmanager
def root_logger_kept() -> Iterator[None]:
    """Give the root logger back as it was once the block ends.

    distilabel's pipeline replaces the root logger's handlers with a `QueueHandler` feeding its worker-log
    listener, and closes that queue when the run ends without taking the handler off. Any record that reached
    the root logger afterwards (matplotlib's "generated new fontManager" on a machine's first plot, for one)
    made `logging` print a `--- Logging error ---` traceback about a closed queue in the middle of a job.
    """
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        added = [h for h in root.handlers if h not in handlers]
        root.handlers[:] = handlers
        root.setLevel(level)
        for handler in added:
            try:
                handler.close()
            except Exception:  # noqa: BLE001 - it is already detached; a failed close must not end the job
                pass


def _quiet_distilabel(path: Path) -> Callable[[], None]:
    """distilabel's `setup_logging` always builds a terminal RichHandler for the queue that collects its
    worker processes' records, and offers no switch; give it a file handler in that place instead."""
    try:
        import distilabel.utils.logging as dl_logging
    except ImportError:  # distilabel not installed: nothing to quiet
        return lambda: None
    from mindsimkit.mindcore.console import plain_tracebacks

    plain_tracebacks()  # distilabel's import installs tracebacks that print every local variable
    original = dl_logging.RichHandler

    def to_file(*_args: Any, **_kwargs: Any) -> logging.Handler:
        return _file_handler(path)

    dl_logging.RichHandler = to_file  # type: ignore[assignment]

    def restore() -> None:
        dl_logging.RichHandler = original

    return restore


def _quiet_datasets() -> Callable[[], None]:
    try:
        from datasets.utils import logging as ds_logging
    except ImportError:
        return lambda: None
    was_enabled = ds_logging.is_progress_bar_enabled()
    ds_logging.disable_progress_bar()

    def restore() -> None:
        if was_enabled:
            ds_logging.enable_progress_bar()

    return restore
