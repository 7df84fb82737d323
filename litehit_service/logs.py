"""Logging set-up of ``litehit serve``: text for people, JSON lines for log shippers.

Records may carry the request fields ``method``, ``trace_id``, ``instance_id``, ``code``
(passed as ``extra=``); the text format appends them as ``key=value``, the JSON format
emits them as fields. No traceback is logged for bad input: only bugs carry one.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TextIO

FIELDS = ("method", "trace_id", "instance_id", "code", "peer")
FORMATS = ("text", "json")


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message key=value ...``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = [f"{k}={getattr(record, k)!r}" for k in FIELDS if hasattr(record, k)]
        if not extras:
            return text
        head, sep, tail = text.partition("\n")  # keep a traceback after the fields
        return " ".join([head, *extras]) + sep + tail


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, the request
    fields present, and ``exception`` (a traceback) for bugs."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in FIELDS:
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_logging(
    fmt: str = "text", level: int = logging.INFO, stream: TextIO | None = None
) -> None:
    """Send the root logger's records to ``stream`` (stderr) in ``fmt`` (text or json)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {list(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    formatter.converter = time.gmtime  # UTC timestamps
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
