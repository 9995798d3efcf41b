"""Native CPU kernels: ``cpu_ops.cpp`` (the fused small ops of a decoder layer) and ``build.py``
(compiles it once per machine with torch's extension builder, loads it as ``torch.ops.sglc_cpu``).

Optional by design: the model falls back to eager torch ops when they cannot be built
(``models/layer_ops.py`` picks).
"""
from .build import ENV, NativeOpsError, load_cpu_ops

__all__ = ["ENV", "NativeOpsError", "load_cpu_ops"]
