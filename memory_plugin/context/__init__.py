"""What an agent is given each turn: the session's short-term state and the user's long-term memory."""
