"""Context assembly: token counts, structured slots, the rolling summary, history as messages, one budget.

Import from the submodules (`memory_plugin.context.budget`, `.slots`, `.summary`, `.history`, `.tokens`);
this package file imports nothing, so no submodule pulls in the others.
"""
