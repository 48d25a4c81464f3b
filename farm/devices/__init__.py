"""Device-level operations above transports: pre-flight checks and fan-out helpers."""
