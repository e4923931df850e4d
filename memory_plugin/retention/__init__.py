"""Retention: how long raw conversation data and bookkeeping rows are kept (docs/privacy.md). `RetentionPolicy`
says it; `apply_retention` deletes what is past it, on the service path, as `memory-plugin maintain` does."""

from .policy import RetentionPolicy, RetentionReport
from .purge import apply_retention

__all__ = ["RetentionPolicy", "RetentionReport", "apply_retention"]
