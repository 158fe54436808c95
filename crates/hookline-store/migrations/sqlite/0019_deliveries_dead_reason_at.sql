CREATE INDEX deliveries_dead_reason_at ON deliveries (dead_reason, dead_at)
    WHERE state = 'dead';
