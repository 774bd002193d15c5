"""The held-out set of identify: development and held-out concepts, the pre-registration
and the ledger (``prereg``), the set in shards pooled once (``shards``) and what a concept
costs, for the shard size a time budget holds (``cost``). They import
``identify.estimation``, and nothing else of ``identify``.
"""
