"""ifdistill's data layer: sources, synthetic data, rendering with loss masks, mixing, batching.

Importing this package is cheap (no torch, no tokenizer); import the module you need:

- ``records``     :class:`Example` (conversation + provenance + IFEval metadata) and ``DataError``
- ``sources``     ``SourceSpec`` / ``load_source``: JSONL, JSON, Parquet, Hugging Face, synthetic
- ``synthetic``   the deterministic verifiable-instruction data and ``synthetic_paths()``
- ``render``      ``render(tokenizer, messages) -> Rendered(input_ids, loss_mask)``, ``render_prompt``
- ``truncation``  the length policy (drop / cut the prompt from the left), with counts
- ``mixing``      exact, nested replay mixing (the definition of ``ratio`` is in its docstring)
- ``sampler``     ``ResumableDistributedSampler``: deterministic per-rank shards, mid-epoch resume
- ``collate``     padding, packed (padding-free) and ICL teacher/student batches
- ``icl``         ``select_demos`` and the teacher/student views with aligned completion positions
- ``manifest``    the per-run data manifest and the per-batch replay share
- ``build``       ``build_train_dataset``: sources -> mixing -> rendering, what training wraps
"""
