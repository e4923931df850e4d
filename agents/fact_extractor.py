"""Fact extraction tuned for Arkcutt's customers (the last step of the budget-request workflow).

With a model: `LLMExtractor` with the plugin's extraction policy plus what a machining shop needs to remember
(materials, tolerances, certifications, budget limits, delivery feedback). Without: the offline
`RuleBasedExtractor`, which already understands these statements in Spanish and English.
"""

from __future__ import annotations

from pydantic_ai.models import Model

from memory_plugin.extraction import FactExtractor, LLMExtractor, RuleBasedExtractor
from memory_plugin.extraction.llm import DEFAULT_EXTRACTION_INSTRUCTIONS

__all__ = ["SHOP_EXTRACTION_INSTRUCTIONS", "build_fact_extractor"]

SHOP_EXTRACTION_INSTRUCTIONS = (
    DEFAULT_EXTRACTION_INSTRUCTIONS
    + """
The user is a customer of Arkcutt, a CNC machining shop (milling, turning, EDM, grinding, anodizing, welding,
laser cutting) that answers budget requests. Worth remembering for this shop:
- preferred materials and grades ("Prefiere aluminio 7075 para prototipos", "Usa siempre acero inoxidable 316L");
- tolerances and finishes they require ("Requiere tolerancias de ±0.05 mm", "Pide anodizado negro");
- certifications and documentation ("Requiere certificación ISO 9001 en todas las piezas", "Necesita
  certificado de material EN 10204 3.1");
- budget limits per order or per part ("No puede superar 1500 € por pedido");
- usual batch sizes (prototypes or production) and the sector they work in;
- feedback on deliveries and quality ("La última entrega llegó tarde", "Quedó muy contento con el acabado");
- what they turned down and do not want suggested again, as a "rejection" ("No quiere que le sugieran acero
  1045", "Do not suggest powder coating");
- who handles their orders ("Su responsable de compras es Marta Ruiz") and when they can receive deliveries.
Not worth remembering: the quantity, drawing or deadline of the request being discussed now, unless the user
says it always applies.
"""
)


def build_fact_extractor(model: Model | str | None) -> FactExtractor:
    """`LLMExtractor` with the shop's instructions when a model (or model name) is given, else the offline
    `RuleBasedExtractor`."""
    if model is None or (isinstance(model, str) and not model.strip()):
        return RuleBasedExtractor()
    return LLMExtractor(model, instructions=SHOP_EXTRACTION_INSTRUCTIONS)
