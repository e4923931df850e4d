"""The plugin's logger and the prefix of its messages (`🧠 [Memory] …`)."""

from __future__ import annotations

import logging

__all__ = ["LOG_PREFIX", "logger"]

logger = logging.getLogger("memory_plugin")
"""Every module logs here; `memory-plugin -v` shows it."""

LOG_PREFIX = "🧠 [Memory]"
"""First word of every message, so the plugin's lines stand out in an application's logs."""
