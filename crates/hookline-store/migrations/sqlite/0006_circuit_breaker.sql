-- The circuit breaker of each subscriber.
ALTER TABLE subscribers ADD COLUMN breaker_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE subscribers ADD COLUMN breaker_open_until BIGINT;
ALTER TABLE subscribers ADD COLUMN breaker_cool_down_ms BIGINT NOT NULL DEFAULT 0;
