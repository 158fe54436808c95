CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_dead_reason_at
    ON deliveries (dead_reason, dead_at, seq) WHERE state = 'dead';
