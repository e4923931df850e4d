"""The write pipeline: from a `MemoryUpdate` or a note to the rows a store upserts."""
