-- Per-subscriber in-flight cap and rate limit (with the limiter's next admission).
ALTER TABLE subscribers ADD COLUMN max_in_flight INTEGER;
ALTER TABLE subscribers ADD COLUMN rate_limit_per_second REAL;
ALTER TABLE subscribers ADD COLUMN rate_next_at BIGINT;
