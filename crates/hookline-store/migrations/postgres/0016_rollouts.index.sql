CREATE INDEX CONCURRENTLY IF NOT EXISTS attempts_first ON attempts (policy, started_at)
    WHERE ordinal = 1;
