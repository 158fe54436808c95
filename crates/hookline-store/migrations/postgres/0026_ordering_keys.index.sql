CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_ordering
    ON deliveries (subscriber_id, ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND state IN ('scheduled', 'in_flight');
