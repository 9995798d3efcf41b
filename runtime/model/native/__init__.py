"""Native CPU kernels: ``kernels/`` (torch-free C++, one variant per instruction set),
``binding/cpu_ops.cpp`` (the ``torch.ops.sglc_cpu`` operators that check, thread and dispatch
to the active variant), ``capabilities.py`` (which level this CPU runs; ``SGLC_CPU_LEVEL``
forces a lower one) and ``build.py`` (compiles and loads them once per machine).

Optional by design: the model falls back to eager torch ops when they cannot be built
(``models/layer_ops.py`` picks).
"""
from .build import (ENV, NativeOpsError, active_level, bf16_is_native, current_level, kernel_info, load_cpu_ops,
                    running_level, use_level)

__all__ = ["ENV", "NativeOpsError", "active_level", "bf16_is_native", "current_level", "kernel_info",
           "load_cpu_ops", "running_level", "use_level"]
