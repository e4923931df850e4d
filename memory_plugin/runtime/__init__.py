"""Putting the parts together: the connector that starts, migrates and connects a manager's database.

The package sits just below the facade (`memory_plugin.manager`): it may import any service, store or rule;
only the faces and the facade import it."""
