-- Claims leave rate-limited subscribers out of their scan; only those have a limiter time.
CREATE INDEX subscribers_rate_limited ON subscribers (rate_next_at)
    WHERE rate_next_at IS NOT NULL;
