"""Is a run what it says it is: verify, the fingerprint, the chain head, replays, callable pins."""
