CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_window ON deliveries (window_start)
    WHERE state = 'scheduled';
