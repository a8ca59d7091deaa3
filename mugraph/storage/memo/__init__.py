"""The verdict memo: a per-process LRU in front of a shared backend (Redis, or a private redis-server)."""
