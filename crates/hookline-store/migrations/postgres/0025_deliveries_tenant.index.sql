CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_tenant_due ON deliveries (tenant_id, run_at)
    WHERE state = 'scheduled' AND NOT held AND tenant_id IS NOT NULL;
