"""SGLang's `sglang.lang` import paths, mirrored so programs that import from them run unchanged:
`from sglc.lang.ir import REGEX_INT` (sglang.lang.ir) and `sglc.lang.global_config`.

Imports nothing from sglc: the executor reads `global_config.default_backend` from here.
"""
