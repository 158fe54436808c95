CREATE INDEX CONCURRENTLY IF NOT EXISTS subscribers_origin ON subscribers (origin);
