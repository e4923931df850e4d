"""Embeddings of facts and questions, through pydantic-ai's `Embedder`.

- `embedder.py`: `MemoryEmbedder` (fixed 384 dimensions, model name stored beside each vector, batching,
  query cache);
- `factory.py`: `default_embedder(settings)`: OpenAI when a key is set, else the offline MiniLM, else none;
- `local.py`: the offline MiniLM (`OfflineMiniLM`): onnxruntime for facts and questions, torch as the fallback;
- `onnx_graph.py`: its graph on onnxruntime, tokenizer and pooling without torch; `onnx_export.py`: the
  one-time export (torch), `python -m memory_plugin.embeddings.onnx_export`;
- `minilm.py`: the offline MiniLM as a pydantic-ai model (`MemoryEmbedder.embedder`);
- `reembed.py`: rebuild the vectors after a model change (`memory-plugin reembed`).
"""

from .embedder import EMBEDDING_DIMENSIONS, LOCAL_MODEL_NAME, OPENAI_MODEL_NAME, MemoryEmbedder
from .factory import default_embedder, local_available, local_embedder

__all__ = [
    "EMBEDDING_DIMENSIONS",
    "LOCAL_MODEL_NAME",
    "OPENAI_MODEL_NAME",
    "MemoryEmbedder",
    "default_embedder",
    "local_available",
    "local_embedder",
]
