"""Export the offline model's transformer to ONNX, once: the only step that needs torch.

    python -m memory_plugin.embeddings.onnx_export [--data-dir DIR]     # what scripts/bootstrap runs

Run at bootstrap or deployment; otherwise the first process that needs a vector and finds no graph runs it
(~5 s with torch's import, one log line saying so), and every later process starts on onnxruntime alone.

The graph (inputs → last hidden state, dynamic batch and sequence; TorchScript exporter, opset 17) is written to
a temporary file, checked against sentence-transformers' own `encode` on `onnx_graph.PROBE_TEXTS` (alone and as
one padded batch, cosine ≥ 0.9999), given torch's probe vectors as metadata (so that opening it later can check
it without torch) and renamed into place: a process never reads a half-written or unchecked file. Then its
mapped copy is written (`onnx_graph.mapped_graph`, the weights in a file of their own, which a fresh process
opens in a third of the time). Files of older exports are removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..logs import LOG_PREFIX, logger
from .onnx_graph import (
    FILE_PREFIX,
    MAPPED_SUFFIX,
    PROBE_META_KEY,
    PROBE_TEXTS,
    OnnxEncoder,
    check_against,
    graph_path,
    mapped_graph,
    open_session,
    read_pipeline,
    write_mapped_graph,
)

__all__ = ["OPSET", "export_graph", "main"]

OPSET = 17


def export_graph(
    model_dir: Path, cache_dir: Path, *, load_model: Callable[[], Any], progress: Callable[[str], None] | None = None
) -> tuple[Path, float]:
    """Export, check and cache the graph of the model in `model_dir`; returns its path and the seconds it took.

    `load_model()` returns the loaded `SentenceTransformer` (torch). `progress(line)` is told when the export
    starts. Raises on any failure (unsupported model, exporter error, vectors that differ from torch's)."""
    pipeline = read_pipeline(model_dir)
    path = graph_path(model_dir, cache_dir)
    if progress is not None:
        progress(f"exporting the offline embedding model to ONNX (once; later processes reuse {path.parent})")
    started = time.perf_counter()
    model = load_model()
    path.parent.mkdir(parents=True, exist_ok=True)
    raw, optimised = temporary = [_temporary(path, n) for n in (1, 2)]
    try:
        _export(model, raw)
        # torch's vectors as sentence-transformers computes them: what the stored facts were embedded with.
        reference = np.asarray(
            model.encode(list(PROBE_TEXTS), normalize_embeddings=pipeline.normalizes, show_progress_bar=False),
            dtype=np.float32,
        )
        open_session(raw, 1, optimize_to=optimised)  # onnxruntime's fusions, done once here
        _store_reference(optimised, reference)
        check_against(OnnxEncoder(pipeline, open_session(optimised, 1), optimised), reference, range(len(PROBE_TEXTS)))
        os.replace(optimised, path)
    finally:
        for tmp in temporary:
            tmp.unlink(missing_ok=True)
    shutil.rmtree(mapped_graph(path).parent, ignore_errors=True)  # a copy of the graph this export replaced
    write_mapped_graph(path)
    _prune(path.parent, keep=path)
    return path, time.perf_counter() - started


def _temporary(path: Path, n: int) -> Path:
    fd, name = tempfile.mkstemp(prefix=f"{path.name}.{n}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def _export(model: Any, tmp: Path) -> None:
    import torch

    features = model.preprocess([PROBE_TEXTS[0]])
    input_names = tuple(n for n in ("input_ids", "attention_mask", "token_type_ids") if n in features)

    class LastHiddenState(torch.nn.Module):
        def __init__(self, transformer: torch.nn.Module) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.transformer(**dict(zip(input_names, inputs, strict=True))).last_hidden_state
            return out

    axes = {name: {0: "batch", 1: "sequence"} for name in (*input_names, "last_hidden_state")}
    # The TorchScript exporter (dynamo=False): measured 1.1 s for MiniLM, with vectors identical to torch's.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes about Python control flow; `check_against` checks the result
        torch.onnx.export(
            LastHiddenState(model[0].auto_model).eval(),
            tuple(features[name] for name in input_names),
            str(tmp),
            input_names=list(input_names),
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
            external_data=False,
        )


def _store_reference(tmp: Path, reference: np.ndarray[Any, Any]) -> None:
    import onnx

    graph = onnx.load(str(tmp))
    entry = graph.metadata_props.add()
    entry.key, entry.value = PROBE_META_KEY, json.dumps(reference.round(7).tolist())
    onnx.save(graph, str(tmp))


def _prune(cache_dir: Path, *, keep: Path) -> None:
    """Remove files of older exports (another model or recipe), their mapped copies, and temporary files left
    by a crash more than an hour ago. A process already running on a removed file is unaffected (its session is
    in memory, or maps a file that stays readable until it closes it)."""
    now = time.time()
    kept = {keep, mapped_graph(keep).parent}
    for old in cache_dir.glob(FILE_PREFIX + "*"):
        try:
            stale_tmp = old.suffix == ".tmp" and now - old.stat().st_mtime > 3600
            if old not in kept and (old.suffix in (".onnx", MAPPED_SUFFIX) or stale_tmp):
                if old.is_dir():
                    shutil.rmtree(old)
                else:
                    old.unlink()
        except OSError:
            pass  # another process pruned it first, or it is not ours to remove


def main(argv: list[str] | None = None) -> None:
    """Export the graph into `--data-dir`/onnx (default: `MEMORY_DATA_DIR`), unless it is there already."""
    from ..settings import MemorySettings
    from .model_files import load_sentence_transformer, model_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    cache_dir = (args.data_dir or MemorySettings().data_dir) / "onnx"
    path = graph_path(model_dir(), cache_dir)
    if path.exists():
        write_mapped_graph(path)  # exported by a version that did not write it
        print(f"{LOG_PREFIX} the offline embedding model's ONNX graph is cached: {path}")
        return
    path, seconds = export_graph(
        model_dir(), cache_dir, load_model=load_sentence_transformer, progress=lambda line: print(LOG_PREFIX, line)
    )
    logger.info("%s exported %s in %.1f s", LOG_PREFIX, path, seconds)
    print(f"{LOG_PREFIX} exported {path} in {seconds:.1f} s")


if __name__ == "__main__":
    main()
