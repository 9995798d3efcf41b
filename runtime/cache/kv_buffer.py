"""KVBuffer: the key/value storage of every layer, one row per token slot.

Slot indices are handed out by the KV pool's allocator (``kv_pool.py``); this class only stores
and reads. A slot holds one token's keys and values for every layer.
"""
from __future__ import annotations

import torch


class KVBuffer:
    """Per-layer key and value tensors of shape ``[num_slots, num_kv_heads, head_dim]``.

    NOTE: the attention backend writes slots in place (``index_copy_``); nothing here zeroes or
    tracks which slots are live — that is the allocator's job.
    """

    __slots__ = ("num_layers", "num_slots", "num_kv_heads", "head_dim", "dtype", "device", "k", "v")

    def __init__(
        self,
        num_layers: int,
        num_slots: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        if min(num_layers, num_slots, num_kv_heads, head_dim) < 1:
            raise ValueError(
                f"KVBuffer: all sizes must be >= 1 (layers={num_layers}, slots={num_slots}, "
                f"kv_heads={num_kv_heads}, head_dim={head_dim})"
            )
        self.num_layers = num_layers
        self.num_slots = num_slots
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (num_slots, num_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]

    @classmethod
    def for_model(
        cls, config, num_slots: int, dtype: torch.dtype | None = None, device: torch.device | str = "cpu"
    ) -> "KVBuffer":
        """A buffer shaped for ``config`` (a ``ModelConfig``); dtype defaults to the config's."""
        return cls(
            config.num_hidden_layers,
            num_slots,
            config.num_key_value_heads,
            config.head_dim,
            dtype or config.torch_dtype,
            device,
        )

    @staticmethod
    def bytes_per_slot(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        """Bytes one token slot takes across all layers (keys and values)."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * num_layers * num_kv_heads * head_dim * itemsize

    @classmethod
    def slots_for_budget(
        cls, budget_bytes: int, num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype
    ) -> int:
        """How many slots fit in ``budget_bytes`` (at least 0)."""
        return max(0, int(budget_bytes) // cls.bytes_per_slot(num_layers, num_kv_heads, head_dim, dtype))

    @property
    def nbytes(self) -> int:
        """Total bytes held by all key and value tensors."""
        return self.num_slots * self.bytes_per_slot(
            self.num_layers, self.num_kv_heads, self.head_dim, self.dtype
        )

    def __repr__(self) -> str:
        return (
            f"KVBuffer(layers={self.num_layers}, slots={self.num_slots}, kv_heads={self.num_kv_heads}, "
            f"head_dim={self.head_dim}, dtype={self.dtype}, {self.nbytes / 2**20:.1f} MiB)"
        )
