CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_tenant_due ON deliveries (tenant_id, run_at)
    WHERE tenant_id IS NOT NULL AND state = 'scheduled' AND NOT held;
