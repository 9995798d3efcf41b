"""Where sglc keeps what it derives once per machine: ``sglc.cache_root`` (one definition for the
compiler and the runtime)."""
from sglc.cache_root import cache_root

__all__ = ["cache_root"]
