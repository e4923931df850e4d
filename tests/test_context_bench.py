"""The context-budget bench runs end to end on a short conversation and keeps every stated fact."""

from __future__ import annotations

from bench.context_budget import run


async def test_short_run_keeps_facts_within_the_budget() -> None:
    result = await run(12, "separate")
    assert result.present  # the first eight turns state facts
    assert all(result.present.values())
    assert result.memory_max <= 1000
    assert all(c.sent <= 1000 for c in result.checkpoints)
    assert result.extraction_calls > 0
    assert result.summary_calls > 0


async def test_with_extraction_the_summary_costs_no_call_of_its_own() -> None:
    result = await run(12, "with_extraction")
    assert all(result.present.values())
    assert result.summary_calls == 0
    assert result.extraction_turns > 0
    assert result.combined_turns == result.extraction_turns  # every extraction call also wrote the summary
    assert result.extraction_calls == result.extraction_turns


async def test_the_prefix_counts_tool_definitions_only_when_the_agent_sends_them() -> None:
    from bench.context_cache import run as cache_run

    bare, with_tools = await cache_run(12), await cache_run(12, tools=True)
    assert bare.tool_tokens == 0  # the default capability sends no tools
    assert with_tools.tool_tokens > 0
    assert bare.tokens == with_tools.tokens  # the same instructions and messages either way
    # Stable definitions ahead of the instructions: the same turns reuse more.
    kept = [(a.share, b.share) for a, b in zip(bare.pairs, with_tools.pairs, strict=True) if a.kind == "kept"]
    assert kept
    assert all(b > a for a, b in kept)
