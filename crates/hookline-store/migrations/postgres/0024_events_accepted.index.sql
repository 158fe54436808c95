CREATE INDEX CONCURRENTLY IF NOT EXISTS events_accepted ON events (accepted_at, id);
