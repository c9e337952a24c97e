"""The config check by concern: :mod:`.schema` (each node against its class), :mod:`.rules` (the named
cross-key rules), :mod:`.stages` (the entry points; stage 1 imports no torch)."""
