"""Remote servers and the local server."""
