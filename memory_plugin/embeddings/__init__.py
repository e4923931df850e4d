"""Embeddings of facts and questions, through pydantic-ai's `Embedder`.

- `embedder.py`: `MemoryEmbedder` (fixed 384 dimensions, model name stored beside each vector, batching,
  query cache);
- `factory.py`: `default_embedder(settings)`: OpenAI when a key is set, else the offline MiniLM, else none;
- `minilm.py`: the offline MiniLM as a pydantic-ai model, imported on its first use;
- `onnx_query.py`: the offline model's transformer on onnxruntime for single questions (same vectors, 2-2.5x
  faster than torch), exported once and cached;
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
