"""The API key's environment variable, read by `sglc serve` and by the srt client alike."""
from __future__ import annotations

#: The environment variable both `sglc serve` and the srt client read when no key is given.
API_KEY_ENV = "SGLC_API_KEY"
