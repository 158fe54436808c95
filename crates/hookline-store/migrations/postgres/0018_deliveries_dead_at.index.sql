CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_dead_at ON deliveries (dead_at)
    WHERE state = 'dead';
