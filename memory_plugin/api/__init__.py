"""The REST API (FastAPI; install the `api` extra): chats and memory of the signed-in user, under RLS."""
