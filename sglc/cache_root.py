"""Where sglc keeps what it derives once per machine (converted models, built native code)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$SGLC_CACHE_DIR``, or ``~/.cache/sglc``."""
    root = os.environ.get("SGLC_CACHE_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "sglc"
