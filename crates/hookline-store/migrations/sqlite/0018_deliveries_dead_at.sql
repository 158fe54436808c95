CREATE INDEX deliveries_dead_at ON deliveries (dead_at) WHERE state = 'dead';
