CREATE INDEX CONCURRENTLY IF NOT EXISTS subscribers_health ON subscribers (id)
    WHERE (status <> 'revoked' AND (failing_since IS NOT NULL OR told IS NOT NULL))
       OR (status = 'revoked' AND told IS DISTINCT FROM 'revoked');
