"""This process's memory map, as tests about where memory lives read it (/proc/self/smaps)."""
from __future__ import annotations

from pathlib import Path

SMAPS = Path("/proc/self/smaps")


def thp_mode() -> str:
    """The system's transparent huge page setting ("always [madvise] never": brackets mark it)."""
    path = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return path.read_text() if path.exists() else "[never]"


def has_huge_pages() -> bool:
    return SMAPS.exists() and "[never]" not in thp_mode()


def mapping_of(address: int) -> dict[str, str]:
    """The /proc/self/smaps fields of the mapping holding ``address``."""
    fields: dict[str, str] = {}
    inside = False
    for line in SMAPS.read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:  # NOTE: a mapping's header line: start-end perms ...
            start, end = (int(a, 16) for a in head.split("-"))
            if inside:
                break
            inside = start <= address < end
        elif inside:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def kib(fields: dict[str, str], key: str) -> int:
    """A smaps size field ("123 kB") in KiB."""
    return int(fields.get(key, "0 kB").split()[0])
