"""`python -m memory_plugin.cli`: the same command line as the `memory-plugin` script."""

from . import app

if __name__ == "__main__":
    app()
