"""Putting one manager together and running it: `assembly.py` (the composition root: database, backends, the
one pool), `connector.py` (start, migrate, connect), `supervisor.py` (work off the request path), `turn.py` (the
end of one turn, for every face). Only the facade (`memory_plugin.manager`) and the faces import it."""
