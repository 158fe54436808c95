CREATE INDEX CONCURRENTLY IF NOT EXISTS subscribers_tenant ON subscribers (tenant_id)
    WHERE tenant_id IS NOT NULL;
