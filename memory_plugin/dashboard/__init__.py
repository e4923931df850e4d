"""The user's memory dashboard: server-rendered pages at `/dashboard` of the REST API (`add_dashboard`)."""

from .routes import add_dashboard

__all__ = ["add_dashboard"]
