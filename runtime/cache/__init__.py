"""KV memory: which slot holds which token's K/V, and which token prefixes are cached.

Bottom-up: ``kv_pool.py`` (KVSlotPool, the slot allocator), ``req_slot_table.py`` (ReqSlotTable,
each running request's slots), ``kv_buffer.py`` (KVBuffer, the per-layer K/V tensors those slots
index), ``radix_cache.py`` (RadixCache, SGLang's RadixAttention prefix tree over the pool).

Imports no other runtime package: the radix cache's request helpers take any object with the
cache handles of :class:`~.radix_cache.CachedRequest` (``scheduling.request.Req`` has them).
"""
