"""Arrow Flight service over a Store, and the remote client (sd.connect)."""
