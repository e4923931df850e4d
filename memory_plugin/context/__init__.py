"""What an agent is given each turn: the session's short-term state and the user's long-term memory, and the
token budget they share (token counts, structured slots, the rolling summary, history as messages).

Import from the submodules (`memory_plugin.context.reader`, `.budget`, `.builder`, `.slots`, `.summary`,
`.history`, `.tokens`); this package file imports nothing, so no submodule pulls in the others.
"""
